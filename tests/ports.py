"""Loopback ports for the servers the tests start, shared by conftest.py and the replica
set harness (replset_faults.py, which also runs outside pytest)."""

import collections
import socket

# Ports handed out lately in this process, never handed out again while listed: a
# port's socket is closed when it is returned, so the kernel may offer it again.
RECENT_PORTS = collections.deque(maxlen=256)


def free_port() -> int:
    """A loopback port the OS picks (never 27017-27019: outside its ephemeral range)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list:
    """`count` distinct loopback ports that were free a moment ago, none of them handed
    out lately by this process. Another socket (a client's ephemeral port) may still take
    one before the server binds it: `TailstreamServer.start` picks again when it chose the
    ports itself."""
    held, chosen = [], []
    try:
        while len(chosen) < count:
            assert len(held) < count + 64, "the kernel keeps offering ports already handed out"
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            if port not in RECENT_PORTS:
                chosen.append(port)
                RECENT_PORTS.append(port)
        return chosen
    finally:
        for s in held:
            s.close()
