"""A ring all-reduce demo for ftdrive: rendezvous, ring all-reduce over TCP, checkpoint and resume.

Each process is one rank of a gang started by ftdrive with the torchrun-style environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, FTDRIVE_*). The ranks meet at rank 0, form a
ring of TCP connections, and for every step all-reduce a vector whose expected sum is known,
so a wrong reduction is caught. Rank 0 checkpoints after every step; when ftdrive restarts the
gang in a new cycle (possibly with another world size) the ranks resume where they left off.
The first cycle always starts at step 1: job ids start again at j1 on a fresh cluster, so a
checkpoint found then belongs to an earlier job of the same id and is overwritten.

Exit codes: 0 done, 1 a peer or the rendezvous failed (or --fail-at-step fired; the runtime
restarts the gang), 2 bad arguments, environment or checkpoint, 3 the reduction was wrong.
Standard library only.
"""

import argparse
import array
import json
import os
import selectors
import signal
import socket
import struct
import sys
import tempfile
import time

LENGTH = struct.Struct("!I")
# Every ring message carries (step, phase, chunk) so that ranks that fell out of step are
# caught as a protocol error instead of silently adding the wrong numbers.
RING_HEADER = struct.Struct("!iii")
# The tag of the last message around the ring: "I am done, you may hang up on me".
BYE = (-1, -1, -1)
MAX_FRAME = 1 << 30
CONNECT_RETRY_S = 0.2


class PeerError(Exception):
    """A neighbour or the master went away, fell silent or broke the protocol."""


class UsageError(Exception):
    """The arguments, environment or checkpoint cannot be used."""


class Context:
    """Who this process is in the current cycle, for log lines."""

    def __init__(self, rank, world, cycle):
        self.rank, self.world, self.cycle = rank, world, cycle

    def log(self, message, stream=None):
        prefix = f"rank {self.rank}/{self.world} cycle {self.cycle}"
        print(f"{prefix}: {message}", file=stream or sys.stdout, flush=True)


# --- command line and environment -------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Ring all-reduce over TCP with checkpoint/resume, run as one rank of an "
        "ftdrive (or torchrun-style) gang. Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
        "and FTDRIVE_* from the environment; with none set it runs alone as world size 1.",
    )
    parser.add_argument("--steps", type=int, default=30, help="steps to run in total (default 30)")
    parser.add_argument("--size", type=int, default=1024, help="floats per vector (default 1024)")
    parser.add_argument(
        "--step-seconds", type=float, default=0.5, help="sleep per step, standing in for compute (default 0.5)"
    )
    parser.add_argument(
        "--ckpt",
        default=None,
        help="checkpoint directory (default $TMPDIR/ftdrive-ring/$FTDRIVE_JOB_ID, "
        "TMPDIR defaulting to /tmp and the job id to 'local')",
    )
    parser.add_argument(
        "--rendezvous-timeout", type=float, default=60.0, help="seconds to wait for all ranks to meet (default 60)"
    )
    parser.add_argument(
        "--peer-timeout",
        type=float,
        default=30.0,
        help="seconds without progress before a neighbour is given up on (default 30)",
    )
    parser.add_argument(
        "--fail-at-step",
        type=int,
        default=None,
        metavar="K",
        help="demo: on the first attempt, exit 1 right before step K",
    )
    parser.add_argument("--fail-rank", type=int, default=0, metavar="R", help="demo: the rank that fails (default 0)")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.size < 1 or args.step_seconds < 0:
        parser.error("--steps must be >= 0, --size >= 1 and --step-seconds >= 0")
    if args.rendezvous_timeout <= 0 or args.peer_timeout <= 0:
        parser.error("--rendezvous-timeout and --peer-timeout must be > 0")
    return args


def env_int(name, default):
    text = os.environ.get(name)
    if text is None or text == "":
        if default is None:
            raise UsageError(f"environment variable {name} is required when WORLD_SIZE > 1")
        return default
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"environment variable {name}={text!r} is not an integer") from None


def default_ckpt_dir():
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, "ftdrive-ring", os.environ.get("FTDRIVE_JOB_ID") or "local")


# --- framing ----------------------------------------------------------------------------
# One frame is a 4-byte big-endian length and that many bytes. Rendezvous frames hold JSON;
# ring frames hold a RING_HEADER and packed doubles.


def frame(payload):
    return LENGTH.pack(len(payload)) + payload


def recv_exact(sock, n, deadline, what):
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PeerError(f"timed out waiting for {what}")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            raise PeerError(f"timed out waiting for {what}") from None
        except OSError as err:
            raise PeerError(f"{what}: {err}") from None
        if not chunk:
            raise PeerError(f"{what}: connection closed")
        buf += chunk
    return bytes(buf)


def send_json(sock, obj, deadline, what):
    sock.settimeout(max(deadline - time.monotonic(), 0.001))
    try:
        sock.sendall(frame(json.dumps(obj).encode()))
    except OSError as err:
        raise PeerError(f"sending {what}: {err}") from None


def recv_json(sock, deadline, what):
    (n,) = LENGTH.unpack(recv_exact(sock, LENGTH.size, deadline, what))
    if n > MAX_FRAME:
        raise PeerError(f"{what}: frame of {n} bytes is too large")
    try:
        obj = json.loads(recv_exact(sock, n, deadline, what))
    except ValueError:
        raise PeerError(f"{what}: not valid JSON") from None
    if not isinstance(obj, dict):
        raise PeerError(f"{what}: expected a JSON object")
    return obj


def connect(host, port, deadline, what):
    """Connects, retrying while the other side is not listening yet."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PeerError(f"could not connect to {what} at {host}:{port} in time")
        try:
            return socket.create_connection((host, port), timeout=min(remaining, 5.0))
        except OSError:
            time.sleep(min(CONNECT_RETRY_S, max(deadline - time.monotonic(), 0)))


def accept(listener, deadline, what):
    listener.settimeout(max(deadline - time.monotonic(), 0.001))
    try:
        conn, _ = listener.accept()
    except socket.timeout:
        raise PeerError(f"timed out waiting for {what} to connect") from None
    return conn


def listen(host, port, reuse=False):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuse:
        # The master port is reused across jobs and cycles; a TIME_WAIT leftover must not block it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


# --- checkpoint -------------------------------------------------------------------------


def read_checkpoint(ckpt_dir):
    """Returns (last completed step, running total, world size), or (0, 0.0, None) if none."""
    path = os.path.join(ckpt_dir, "checkpoint.json")
    try:
        with open(path) as f:
            data = json.load(f)
        return int(data["step"]), float(data["total"]), data.get("world_size")
    except FileNotFoundError:
        return 0, 0.0, None
    except (ValueError, KeyError, TypeError) as err:
        # Writes are atomic, so a bad file was edited by hand; refuse rather than guess.
        raise UsageError(f"checkpoint {path} is unreadable ({err}); fix or delete it") from None


def write_checkpoint(ckpt_dir, step, world, total):
    """Writes the checkpoint atomically: a crash leaves either the old or the new file."""
    os.makedirs(ckpt_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", suffix=".tmp", dir=ckpt_dir)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"step": step, "world_size": world, "total": total}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(ckpt_dir, "checkpoint.json"))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    # Make the rename itself durable.
    dir_fd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# --- rendezvous -------------------------------------------------------------------------


def rendezvous(ctx, args, master, advertise, my_port, ckpt_dir):
    """Meets every rank at rank 0. Returns (peer table, start step, running total).

    Rank 0 alone reads the checkpoint (from the second cycle on) and hands out the start step,
    so all ranks agree on it even if they see different file systems.
    """
    deadline = time.monotonic() + args.rendezvous_timeout
    me = [advertise, my_port]
    if ctx.rank == 0:
        step, total, ckpt_world = read_checkpoint(ckpt_dir) if ctx.cycle > 1 else (0, 0.0, None)
        if ckpt_world is not None and ckpt_world != ctx.world:
            ctx.log(f"checkpoint was written with world size {ckpt_world}; continuing with {ctx.world}")
        table = {"peers": [None] * ctx.world, "start_step": step + 1, "total": total, "cycle": ctx.cycle}
        table["peers"][0] = me
        if ctx.world > 1:
            gather_table(ctx, master, table, deadline)
        return table["peers"], table["start_step"], table["total"]

    sock = connect(master[0], master[1], deadline, "the master (rank 0)")
    try:
        hello = {"rank": ctx.rank, "world_size": ctx.world, "cycle": ctx.cycle, "addr": me}
        send_json(sock, hello, deadline, "hello to the master")
        table = recv_json(sock, deadline, "the rendezvous table from the master")
    finally:
        sock.close()
    if table.get("cycle") != ctx.cycle or len(table.get("peers", [])) != ctx.world:
        raise PeerError(f"the master answered for cycle {table.get('cycle')}, not this one")
    return table["peers"], int(table["start_step"]), float(table["total"])


def gather_table(ctx, master, table, deadline):
    """Rank 0: collects a hello from every other rank, then sends everyone the table."""
    listener = listen(master[0], master[1], reuse=True)
    conns = []
    try:
        while len(conns) < ctx.world - 1:
            conn = accept(listener, deadline, f"{ctx.world - 1 - len(conns)} more rank(s)")
            conns.append(conn)
            hello = recv_json(conn, deadline, "a hello")
            rank = hello.get("rank")
            if hello.get("world_size") != ctx.world or hello.get("cycle") != ctx.cycle:
                raise PeerError(f"rank {rank} is in world {hello.get('world_size')} cycle {hello.get('cycle')}")
            if not isinstance(rank, int) or not 0 < rank < ctx.world or table["peers"][rank] is not None:
                raise PeerError(f"unexpected or duplicate rank {rank!r} at rendezvous")
            addr = hello.get("addr")
            if not (isinstance(addr, list) and len(addr) == 2 and isinstance(addr[1], int)):
                raise PeerError(f"rank {rank} sent a bad address {addr!r}")
            table["peers"][rank] = addr
        for conn in conns:
            send_json(conn, table, deadline, "the rendezvous table")
    finally:
        for conn in conns:
            conn.close()
        listener.close()


# --- the ring ---------------------------------------------------------------------------


class Ring:
    """The two connections of one rank: it sends to its right and receives from its left."""

    def __init__(self, right, left, peer_timeout):
        self.right, self.left, self.peer_timeout = right, left, peer_timeout
        # The left neighbour may already have sent the next message; keep what we over-read.
        self.inbox = bytearray()
        for sock in (right, left):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)

    @classmethod
    def connect(cls, ctx, listener, peers, args):
        deadline = time.monotonic() + args.rendezvous_timeout
        right_rank, left_rank = (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world
        host, port = peers[right_rank]
        # Connect before accepting: the listener's backlog completes the handshake, so no rank
        # waits on another and the ring forms in one pass.
        right = connect(host, port, deadline, f"right neighbour rank {right_rank}")
        left = None
        try:
            send_json(right, {"rank": ctx.rank, "cycle": ctx.cycle}, deadline, "hello to the right neighbour")
            left = accept(listener, deadline, f"left neighbour rank {left_rank}")
            hello = recv_json(left, deadline, "hello from the left neighbour")
            if hello.get("rank") != left_rank or hello.get("cycle") != ctx.cycle:
                raise PeerError(f"expected rank {left_rank} of cycle {ctx.cycle} on the left, got {hello}")
        except BaseException:
            right.close()
            if left is not None:
                left.close()
            raise
        return cls(right, left, args.peer_timeout)

    def goodbye(self):
        """Closes the ring cleanly once every rank is done.

        Without it a rank that finished first would hang up on a neighbour still waiting in
        its last exchange, which that neighbour must take for a failure.
        """
        self.exchange(BYE, b"", BYE, closing=True)
        self.close()

    def close(self):
        self.right.close()
        self.left.close()

    def exchange(self, header, payload, expect, closing=False):
        """Sends one message right while receiving the one tagged `expect` from the left.

        Done together and non-blocking because every rank sends at once: with blocking sends,
        large chunks would fill the socket buffers and deadlock the whole ring. With `closing`,
        the right neighbour hanging up after our message went out is the normal end, not a failure.
        """
        out = memoryview(frame(RING_HEADER.pack(*header) + payload))
        sent = 0
        with selectors.DefaultSelector() as sel:
            # The right neighbour never sends to us, so its socket turning readable means it closed.
            sel.register(self.right, selectors.EVENT_READ | selectors.EVENT_WRITE, "right")
            sel.register(self.left, selectors.EVENT_READ, "left")
            message = self._take_message()
            while message is None or sent < len(out):
                if message is not None and self.left in sel.get_map():
                    # Our message is here; leave anything further for the next call.
                    sel.unregister(self.left)
                events = sel.select(timeout=self.peer_timeout)
                if not events:
                    raise PeerError(f"no progress with the neighbours for {self.peer_timeout:g}s")
                for key, mask in events:
                    if key.data == "left":
                        self._recv_some()
                        continue
                    if mask & selectors.EVENT_READ:
                        if closing and sent == len(out):
                            sel.unregister(self.right)
                            continue
                        self._check_right_alive()
                    if mask & selectors.EVENT_WRITE:
                        sent += self._send_some(out[sent:])
                        if sent == len(out):
                            sel.modify(self.right, selectors.EVENT_READ, "right")
                if message is None:
                    message = self._take_message()
        got = RING_HEADER.unpack_from(message)
        if got != tuple(expect):
            raise PeerError(f"ring out of step: expected message {tuple(expect)}, got {got}")
        return message[RING_HEADER.size :]

    def _take_message(self):
        if len(self.inbox) < LENGTH.size:
            return None
        (n,) = LENGTH.unpack_from(self.inbox)
        if n > MAX_FRAME or n < RING_HEADER.size:
            raise PeerError(f"left neighbour sent a bad frame length {n}")
        if len(self.inbox) < LENGTH.size + n:
            return None
        message = bytes(self.inbox[LENGTH.size : LENGTH.size + n])
        del self.inbox[: LENGTH.size + n]
        return message

    def _send_some(self, data):
        try:
            return self.right.send(data)
        except BlockingIOError:
            return 0
        except OSError as err:
            raise PeerError(f"right neighbour: {err}") from None

    def _recv_some(self):
        try:
            data = self.left.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError as err:
            raise PeerError(f"left neighbour: {err}") from None
        if not data:
            raise PeerError("left neighbour closed the connection")
        self.inbox += data

    def _check_right_alive(self):
        try:
            data = self.right.recv(1)
        except BlockingIOError:
            return
        except OSError as err:
            raise PeerError(f"right neighbour: {err}") from None
        if not data:
            raise PeerError("right neighbour closed the connection")
        raise PeerError("right neighbour sent unexpected data")


def chunk_bounds(size, world):
    """Splits [0, size) into `world` nearly equal, contiguous chunks (some may be empty)."""
    base, extra = divmod(size, world)
    bounds, start = [], 0
    for i in range(world):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def ring_allreduce(ring, ctx, step, vector):
    """Sums `vector` over all ranks in place: reduce-scatter, then all-gather.

    Each rank moves about 2 * (world-1)/world of the vector, independent of the world size.
    """
    world, rank = ctx.world, ctx.rank
    if world == 1:
        return vector
    bounds = chunk_bounds(len(vector), world)

    def chunk(i):
        lo, hi = bounds[i]
        return vector[lo:hi].tobytes()

    def receive(i, payload, add):
        lo, hi = bounds[i]
        incoming = array.array("d")
        incoming.frombytes(payload)
        if len(incoming) != hi - lo:
            raise PeerError(f"chunk {i} has {len(incoming)} floats, expected {hi - lo}")
        if add:
            for j, value in enumerate(incoming):
                vector[lo + j] += value
        else:
            vector[lo:hi] = incoming

    # Reduce-scatter: after world-1 rounds rank r holds the full sum of chunk (r+1) % world.
    for phase in range(world - 1):
        send_i, recv_i = (rank - phase) % world, (rank - phase - 1) % world
        payload = ring.exchange((step, phase, send_i), chunk(send_i), (step, phase, recv_i))
        receive(recv_i, payload, add=True)
    # All-gather: pass the finished chunks around until every rank has all of them.
    for phase in range(world - 1):
        send_i, recv_i = (rank - phase + 1) % world, (rank - phase) % world
        tag = world - 1 + phase
        payload = ring.exchange((step, tag, send_i), chunk(send_i), (step, tag, recv_i))
        receive(recv_i, payload, add=False)
    return vector


# --- the training loop ------------------------------------------------------------------


def local_vector(step, rank, size):
    """This rank's contribution at `step` (1-based): step * (rank + 1) in every element."""
    return array.array("d", [float(step * (rank + 1))]) * size


def expected_sum(step, world):
    return float(step * world * (world + 1) // 2)


def first_attempt():
    # The demo failure fires once, so the retry that follows shows the job recovering.
    return os.environ.get("FTDRIVE_ATTEMPT", "1") in ("", "1")


def train(ctx, args, ring, start_step, total, ckpt_dir):
    """Runs steps start_step..args.steps; returns (running total, exit code)."""
    for step in range(start_step, args.steps + 1):
        if args.fail_at_step == step and args.fail_rank == ctx.rank and first_attempt():
            ctx.log(f"failing on purpose before step {step} (--fail-at-step, first attempt only)", sys.stderr)
            return None, 1
        vector = local_vector(step, ctx.rank, args.size)
        time.sleep(args.step_seconds)  # stands in for the forward and backward pass
        ring_allreduce(ring, ctx, step, vector)
        want = expected_sum(step, ctx.world)
        bad = next((i for i, v in enumerate(vector) if v != want), None)
        if bad is not None:
            message = f"step {step}: element {bad} is {vector[bad]}, expected {want}; the reduction is wrong"
            ctx.log(message, sys.stderr)
            return None, 3
        total += want
        if ctx.rank == 0:
            write_checkpoint(ckpt_dir, step, ctx.world, total)
            ctx.log(f"step {step}/{args.steps} ok (sum per element {want})")
    return total, 0


def on_sigterm(signum, frame_):
    # Exit at once: the runtime is tearing the gang down, and the checkpoint on disk is
    # always complete because it is replaced atomically.
    print(f"rank {os.environ.get('RANK', '0')}: SIGTERM, exiting", file=sys.stderr, flush=True)
    os._exit(128 + signum)


def run(args):
    world = env_int("WORLD_SIZE", 1)
    rank = env_int("RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"RANK={rank} WORLD_SIZE={world} is not a valid rank")
    cycle = env_int("FTDRIVE_CYCLE", env_int("TORCHELASTIC_RESTART_COUNT", 0) + 1)
    ctx = Context(rank, world, cycle)
    master_addr = os.environ.get("MASTER_ADDR") or "127.0.0.1"
    master_port = env_int("MASTER_PORT", 0 if world == 1 else None)
    advertise = os.environ.get("FTDRIVE_ADVERTISE_ADDR", "127.0.0.1")
    ckpt_dir = args.ckpt or default_ckpt_dir()

    # Listen for the left neighbour before rendezvous, so the address we announce already works.
    listener = listen(advertise, 0) if world > 1 else None
    ring = None
    try:
        my_port = listener.getsockname()[1] if listener else 0
        peers, start_step, total = rendezvous(ctx, args, (master_addr, master_port), advertise, my_port, ckpt_dir)
        if start_step > args.steps and start_step > 1:
            ctx.log(f"checkpoint already has {start_step - 1} steps, total {total}; nothing left to run")
        elif start_step > 1:
            ctx.log(f"resumed at step {start_step} (checkpoint had {start_step - 1} steps, total {total})")
        else:
            ctx.log(f"starting at step 1 of {args.steps}")
        if world > 1:
            ring = Ring.connect(ctx, listener, peers, args)
            listener.close()
            listener = None
        total, code = train(ctx, args, ring, start_step, total, ckpt_dir)
        if code:
            return code
        if ring:
            ring.goodbye()
            ring = None
    finally:
        if ring:
            ring.close()
        if listener:
            listener.close()
    if rank == 0:
        print(f"done: steps={args.steps} total={total} world={world}", flush=True)
    ctx.log("finished")
    return 0


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, on_sigterm)
    prefix = f"ring_allreduce rank {os.environ.get('RANK', '0')}"
    try:
        return run(args)
    except UsageError as err:
        print(f"{prefix}: {err}", file=sys.stderr, flush=True)
        return 2
    except PeerError as err:
        print(f"{prefix}: peer failure: {err}; exiting so the gang is restarted", file=sys.stderr, flush=True)
        return 1
    except OSError as err:
        # Typically the master port is taken or the checkpoint cannot be written; a new cycle
        # gets a new port, so this is worth a retry.
        print(f"{prefix}: {err}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
