"""Prints a TCP port on 127.0.0.1 that nothing listens on, for an end-to-end script's servers.

Usage: python3 tests/e2e/free_port.py STATE_FILE

With PIXELS_E2E_PORTS=LO-HI (scripts/test gives each script it runs side by side its own
range, below the kernel's ephemeral ports) the port is the next free one of that range after the
last one handed out, remembered in STATE_FILE (in the script's own temporary directory): scripts
running at once never pick the same port, and neither can an outgoing connection's ephemeral
port, as a port the kernel picks could be between this check and the server's bind. Without it,
a port the kernel picks. (Not DGX_PIXELS_*: the exporter takes those for its configuration
and refuses an unknown one.)
"""
import os
import socket
import sys


def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def main():
    state = sys.argv[1]
    ports = os.environ.get("PIXELS_E2E_PORTS")
    if not ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            print(s.getsockname()[1])
        return
    lo, hi = (int(p) for p in ports.split("-"))
    try:
        with open(state) as f:
            start = int(f.read())
    except (OSError, ValueError):
        start = lo
    for port in range(max(start, lo), hi + 1):
        if free(port):
            with open(state, "w") as f:
                f.write(str(port + 1))
            print(port)
            return
    sys.exit(f"free_port: no free port left in PIXELS_E2E_PORTS={ports}")


main()
