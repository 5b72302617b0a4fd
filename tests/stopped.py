"""SIGSTOP that has taken effect, shared by test_replset.py and the replica set harness
(replset_faults.py, which also runs outside pytest).

`kill(pid, SIGSTOP)` returns once the signal is queued; the process stops only when
one of its threads runs to take it and stops the others. Until then its other threads
go on: a server thread woken by a message answers it. On 2 loaded vCPUs every thread of
a server was stopped up to 14 ms after `kill` returned (200 tries with three busy
loops beside it), long enough for a "stopped" secondary to acknowledge the primary's
next entry (a majority write committed in one CI run of six). A test whose premise is a
stopped process waits for it."""

import glob
import signal
import time

# How long a stop may take before the caller is told (far above the 14 ms measured).
STOP_LIMIT_S = 10.0


def thread_states(pid: int) -> list:
    """The state letter of each thread of process `pid` (`/proc/PID/task/TID/stat`'s
    third field; a thread that exits meanwhile is skipped)."""
    states = []
    for path in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            with open(path) as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (second field) is in parentheses and may hold spaces.
        states.append(stat[stat.rindex(")") + 2])
    return states


def stop(proc, limit_s: float = STOP_LIMIT_S) -> None:
    """Sends SIGSTOP to `proc` (a `subprocess.Popen`) and returns once every one of its
    threads is stopped (or dead), or once it exited; raises TimeoutError past `limit_s`."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + limit_s
    while proc.poll() is None:
        states = thread_states(proc.pid)
        if states and all(s in "TZX" for s in states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {proc.pid} not stopped after {limit_s} s: {states}")
        time.sleep(0.001)
