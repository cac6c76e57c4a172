"""The Gemini Live simulator in a process of its own, for `voicecore demo --model-vendor gemini`.

Owns the child process around voicecore.sim.gemini.serve_gemini_sim and the parent's handle on it. In one
process with the carrier simulator, the simulated vendor's work (16 kHz caller audio decoded and judged by its
activity detection, its transcription's phrase search, 24 kHz answers dithered and encoded) stalled the carrier's
20 ms ticker at 50 calls on a busy machine: thousands of harness stalls, and the model's audio recorded as sent
while the carrier's process, which also sends it, was not running. A real vendor is not on the carrier's machine;
here it is at least not on its event loop. The bench does the same (bench/simproc.py).

    python -m voicecore.sim.gemini_process --config FILE --port-file FILE --out FILE

``--config``: a pickled GeminiSimConfig. The bound port is written to ``--port-file`` once it listens; on SIGTERM
it stops and writes every connection's ConnectionRecord, pickled, to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import signal
import sys
import tempfile
from pathlib import Path

from voicecore.sim.gemini import serve_gemini_sim
from voicecore.sim.gemini_core import ConnectionRecord, GeminiSimConfig
from voicecore.sim.process_shell import announce_and_serve, write_atomically

START_TIMEOUT_S = 60.0  # imports (numpy, the clips) on a loaded 2-core machine
STOP_TIMEOUT_S = 30.0


async def _serve(config: GeminiSimConfig, port_file: Path, out: Path) -> None:
    sim, port = await serve_gemini_sim("127.0.0.1", 0, config)
    await announce_and_serve(port, port_file)
    await sim.aclose()
    write_atomically(out, pickle.dumps([c.record for c in sim.connections], protocol=pickle.HIGHEST_PROTOCOL))


class GeminiSimProcess:
    """The parent's handle: ``start`` a simulator process with a config, its ``port``, ``stop`` for its records."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, workdir: tempfile.TemporaryDirectory) -> None:
        self.process = process
        self.port = port
        self._workdir = workdir
        self._records: list[ConnectionRecord] | None = None

    @classmethod
    async def start(cls, config: GeminiSimConfig) -> "GeminiSimProcess":
        workdir = tempfile.TemporaryDirectory(prefix="voicecore-gemini-sim-")
        base = Path(workdir.name)
        (base / "config").write_bytes(pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "voicecore.sim.gemini_process", "--config", str(base / "config"),
            "--port-file", str(base / "port"), "--out", str(base / "records"), stderr=asyncio.subprocess.PIPE)
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        while not (base / "port").exists():
            if process.returncode is not None or asyncio.get_running_loop().time() > deadline:
                if process.returncode is None:
                    process.kill()
                stderr = (await process.communicate())[1].decode(errors="replace")[-2000:]
                workdir.cleanup()
                raise RuntimeError(f"the Gemini simulator process did not start (exit {process.returncode}): {stderr}")
            await asyncio.sleep(0.05)
        return cls(process, int((base / "port").read_text()), workdir)

    async def stop(self) -> list[ConnectionRecord]:
        """Stop the process (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and return its connections' records (none
        if it died without writing them: a simulator crash is in the demo's stderr and its figures are empty)."""
        if self._records is not None:
            return self._records
        process = self.process
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            process.kill()
            _, stderr = await process.communicate()
        if stderr:
            sys.stderr.write(stderr.decode(errors="replace"))  # a traceback in it fails the demo (tracebacks())
        out = Path(self._workdir.name) / "records"
        self._records = pickle.loads(out.read_bytes()) if out.exists() else []
        self._workdir.cleanup()
        return self._records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="voicecore: the Gemini Live simulator in a process of its own")
    parser.add_argument("--config", required=True, help="a pickled GeminiSimConfig")
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    config = pickle.loads(Path(args.config).read_bytes())
    if not isinstance(config, GeminiSimConfig):
        parser.error("--config holds no GeminiSimConfig")
    import uvloop

    uvloop.run(_serve(config, Path(args.port_file), Path(args.out)))


if __name__ == "__main__":
    main()
