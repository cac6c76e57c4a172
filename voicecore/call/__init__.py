"""A call's logic, sans-I/O: the model-session core, the drivers on top of it and the call record.

``core`` (response -> tag, framing, barge-in mechanism), ``controller`` (turn-taking policies) and
``spine`` (the core alone) are the two call drivers of ``driver``; ``flow`` says what the agent says;
``record`` is the record format and the recorder that wraps a driver. The model worker's shell
(workers/model/main.py) feeds them and applies their actions; nothing here knows sockets, shared memory,
files or the clock.
"""
