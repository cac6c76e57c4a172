"""free_port never hands out a port twice in one process: a stack's ports are all chosen before any worker
binds one, and the kernel may give a closed socket's port to the next bind."""

from voicecore.demo import free_port


def test_free_port_never_repeats_within_a_process():
    # 2,000 draws from ~28,000 ephemeral ports: without the rule, a repeat is all but certain (birthday bound).
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < port < 65536 for port in ports)
