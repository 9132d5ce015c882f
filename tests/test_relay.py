"""The relay (costctl.relay): it starts the job, writes the run log byte for byte, relays both
streams to the watch with their offsets, serves a re-attaching watch from an offset, records
the exit status in its state file, and never lets a watch that does not read hold the job up."""

from __future__ import annotations

import json
import socket
import sys
import threading

import pytest

from costctl.errors import UsageError
from costctl.relay import protocol as p
from costctl.relay.client import RelayChild


class _Collect:
    """A stand-in for the OutputMux: keeps what it is given, per stream and in order."""

    def __init__(self, fail_first: int = 0) -> None:
        self.chunks: list[tuple[str, bytes]] = []
        self.fail_first = fail_first
        self.finished = 0

    def write(self, stream: str, data: bytes) -> None:
        if self.fail_first > 0:
            self.fail_first -= 1
            raise ValueError("boom in the output handling")
        self.chunks.append((stream, data))

    def stream(self, name: str) -> bytes:
        return b"".join(d for s, d in self.chunks if s == name)

    def finish(self) -> None:
        self.finished += 1


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_both_streams_reach_the_watch_and_the_log_byte_for_byte_with_the_jobs_exit_status(tmp_path):
    log = tmp_path / "run.log"
    log.write_bytes(b"earlier start\n")  # a restart appends; offsets are the log's own
    mux = _Collect()
    code = ("import os; os.write(1, b'out \\r\\xff\\xfe\\x1b[31m'); os.write(2, b'err \\xe2\\x9c'); "
            "os.write(1, b'no newline'); raise SystemExit(3)")
    child = RelayChild(_py(code), mux, log_path=log)  # type: ignore[arg-type]
    assert child.wait(30) == 3
    assert mux.stream("stdout") == b"out \r\xff\xfe\x1b[31mno newline"
    assert mux.stream("stderr") == b"err \xe2\x9c"
    data = log.read_bytes()
    assert data.startswith(b"earlier start\n") and len(data) == len(b"earlier start\n") + 12 + 6 + 10
    state = p.read_state(p.state_path(log))
    assert state is not None and state["exit_status"] == 3 and state["ended"] is True
    assert state["log_bytes"] == len(data) and state["job_pid"] == child.pid
    assert not p.relay_alive(state)
    assert mux.finished >= 1


def test_a_missing_command_is_a_one_line_error_with_status_127(tmp_path):
    with pytest.raises(UsageError) as err:
        RelayChild(["/nonexistent/train"], _Collect(), log_path=tmp_path / "run.log")  # type: ignore[arg-type]
    assert err.value.exit_code == 127 and "command not found" in err.value.message


def _attach(path, offset: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.sendall(p.OFFSET.pack(offset))
    return sock


def test_a_watch_that_attaches_at_an_offset_gets_every_byte_from_there_with_its_stream(tmp_path):
    log = tmp_path / "run.log"
    mux = _Collect()
    # the job writes, then waits for the test to attach, then writes more and ends
    go = tmp_path / "go"
    code = ("import os, time\n"
            "os.write(1, b'A' * 10); os.write(2, b'B' * 5); os.write(1, b'C' * 7)\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            "os.write(2, b'D' * 3)\n")
    child = RelayChild(_py(code), mux, log_path=log)  # type: ignore[arg-type]
    while log.stat().st_size < 22:
        threading.Event().wait(0.01)
    sock = _attach(child.socket_path, 12)  # in the middle of the 'B's
    go.touch()
    frames = []
    while True:
        frame = p.recv_frame(sock)
        if frame is None:
            break
        frames.append(frame)
        if frame[0] == p.EOF:
            break
    sock.close()
    assert child.wait(30) == 0
    kinds = [f[0] for f in frames]
    assert kinds[0] == p.STARTED and json.loads(frames[0][2])["pid"] == child.pid
    out = [(k, off, data) for k, off, data in frames if k in (p.STDOUT, p.STDERR)]
    logged = log.read_bytes()
    # from offset 12 on, contiguous, each frame where the log has it and on its own stream
    assert out[0][1] == 12 and b"".join(d for _, _, d in out) == logged[12:]
    for kind, off, data in out:
        assert logged[off:off + len(data)] == data
        assert set(data) <= (set(b"BD") if kind == p.STDERR else set(b"AC"))
    assert p.EXITED in kinds and kinds[-1] == p.EOF
    assert mux.stream("stdout") == b"A" * 10 + b"C" * 7 and mux.stream("stderr") == b"BBBBBDDD"


def test_an_exception_in_the_output_handling_is_reported_once_and_reading_goes_on(tmp_path):
    log = tmp_path / "run.log"
    mux = _Collect(fail_first=1)
    errors: list[BaseException] = []
    code = "import os, time\nos.write(1, b'first')\ntime.sleep(0.3)\nos.write(1, b'second')\n"
    child = RelayChild(_py(code), mux, log_path=log, on_error=errors.append)  # type: ignore[arg-type]
    assert child.wait(30) == 0
    assert [type(e) for e in errors] == [ValueError]
    assert mux.stream("stdout") == b"second"  # the failed chunk is lost to the watch only
    assert log.read_bytes() == b"firstsecond"  # not to the run log


def test_a_watch_that_never_reads_does_not_hold_the_job_up(tmp_path):
    log = tmp_path / "run.log"
    size = 24 << 20  # more than a client may fall behind (CLIENT_MAX_BYTES) and the socket buffers
    code = (f"import os\nstep = b'x' * 65536\nfor _ in range({size} // 65536):\n    os.write(1, step)\n")
    gate = threading.Event()

    class _Stuck(_Collect):
        def write(self, stream: str, data: bytes) -> None:
            gate.wait(60)  # the watch's reader is stuck for the whole run

    mux = _Stuck()
    child = RelayChild(_py(code), mux, log_path=log)  # type: ignore[arg-type]
    try:
        state = None
        for _ in range(3000):
            state = p.read_state(p.state_path(log))
            if state and state.get("ended"):
                break
            threading.Event().wait(0.01)
        assert state and state["ended"] and state["exit_status"] == 0
        assert log.stat().st_size == size
    finally:
        gate.set()
        child.kill()


def test_a_watch_far_behind_the_job_gets_every_byte_on_its_stream_from_the_log(tmp_path):
    log = tmp_path / "run.log"
    # 24 MiB on stdout and 6 MiB on stderr, interleaved, every 64 KiB piece different
    code = ("import os\n"
            "for i in range(384):\n"
            "    os.write(1, (b'%08d' % i) * 8192)\n"
            "    if i % 4 == 0: os.write(2, (b'E%07d' % i) * 8192)\n")
    want_out = b"".join((b"%08d" % i) * 8192 for i in range(384))
    want_err = b"".join((b"E%07d" % i) * 8192 for i in range(0, 384, 4))
    gate = threading.Event()

    class _Late(_Collect):
        def write(self, stream: str, data: bytes) -> None:
            gate.wait(60)  # stuck until the job has ended: far more behind than the relay queues
            super().write(stream, data)

    mux = _Late()
    child = RelayChild(_py(code), mux, log_path=log)  # type: ignore[arg-type]
    try:
        for _ in range(3000):
            state = p.read_state(p.state_path(log))
            if state and state.get("ended"):
                break
            threading.Event().wait(0.01)
        assert state and state["ended"], "the job was held up by a watch that does not read"
    finally:
        gate.set()
    assert child.wait(60) == 0
    assert len(log.read_bytes()) == len(want_out) + len(want_err)
    assert mux.stream("stdout") == want_out
    assert mux.stream("stderr") == want_err


def test_the_relay_sleeps_until_an_fd_is_ready_not_polling(tmp_path):
    # The relay's loop blocks in select with no timeout: the job's pipes, the watches' sockets
    # and a pidfd of the job (readable at its exit) wake it; nothing else does.
    from costctl.relay.server import Relay

    class Counting:
        def __init__(self, sel):
            self.sel, self.timeouts = sel, []

        def select(self, timeout=None):
            self.timeouts.append(timeout)
            return self.sel.select(timeout)

        def __getattr__(self, name):
            return getattr(self.sel, name)

    log = tmp_path / "run.log"
    relay = Relay(_py("import time; print('hi', flush=True); time.sleep(1.0); raise SystemExit(5)"),
                  log_path=log, state_path=p.state_path(log), sock_path=tmp_path / "r.sock", control=None)
    relay.sel = Counting(relay.sel)  # type: ignore[assignment]
    assert relay.run() == 5
    assert log.read_bytes() == b"hi\n"
    before_exit = relay.sel.timeouts[:2]
    assert before_exit and all(t is None for t in before_exit), relay.sel.timeouts
    assert len(relay.sel.timeouts) <= 8, relay.sel.timeouts  # not one per 0.05 s of the job's second


def test_bytes_another_process_appends_to_the_log_are_not_relayed_and_offsets_stay_the_logs(tmp_path):
    """The watch's before_stop hook appends its output to the run log: the relay's offsets
    follow the file (the watch's parser reads the log back at them) and those bytes never
    reach the watch as the job's output."""
    import time

    log = tmp_path / "run.log"
    go = tmp_path / "go"
    mux = _Collect()
    spans: list[tuple[str, int, int]] = []
    code = ("import os, time\n"
            "os.write(1, b'a\\n')\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            "os.write(1, b'b\\n')\n")
    child = RelayChild(_py(code), mux, log_path=log,  # type: ignore[arg-type]
                       on_output=lambda stream, off, n: spans.append((stream, off, n)))
    deadline = time.monotonic() + 20
    while mux.stream("stdout") != b"a\n" and time.monotonic() < deadline:
        time.sleep(0.01)
    with open(log, "ab") as fh:
        fh.write(b"\n[costctl before_stop hook output]\nHOOK\n")
    go.touch()
    assert child.wait(30) == 0
    assert mux.stream("stdout") == b"a\nb\n"
    data = log.read_bytes()
    assert b"HOOK" in data
    assert [data[off:off + n] for _, off, n in spans] == [b"a\n", b"b\n"]


def test_frame_reader_asks_small_pieces_while_sparse_and_large_ones_in_a_flood():
    import socket as _socket

    from costctl.relay import protocol as proto

    a, b = _socket.socketpair()
    try:
        reader = proto.FrameReader(b, bufsize=1 << 20)
        a.sendall(proto.HEADER.pack(proto.STDOUT, 0, 5) + b"hello")
        assert reader.next() == (proto.STDOUT, 0, b"hello")
        assert reader._ask == proto.FrameReader.SMALL_RECV  # a line now and then: 64 KiB asked
        payload = b"x" * 60_000
        frames = b"".join(proto.HEADER.pack(proto.STDOUT, i * 60_000, 60_000) + payload for i in range(8))
        import threading as _threading

        sender = _threading.Thread(target=a.sendall, args=(frames,))
        sender.start()  # more than the socket holds: sent while read
        got, asks = [], []
        for _ in range(8):
            got.append(reader.next())
            asks.append(reader._ask)
        sender.join(10)
        assert [f[2] for f in got] == [payload] * 8
        assert 1 << 20 in asks  # a full recv: large pieces while the flood lasts
        a.sendall(proto.HEADER.pack(proto.STDOUT, 0, 3) + b"end")
        assert reader.next() == (proto.STDOUT, 0, b"end")
        assert reader._ask == proto.FrameReader.SMALL_RECV  # sparse again
    finally:
        a.close()
        b.close()


def test_read_chunk_reads_small_output_whole_and_a_flood_in_big_pieces_in_order():
    import fcntl
    import os

    from costctl.relay.server import read_chunk

    r, w = os.pipe()
    try:
        fcntl.fcntl(r, 1031, 1 << 20)  # F_SETPIPE_SZ, as the relay enlarges the job's pipes
    except OSError:
        pass
    os.set_blocking(r, False)
    small = memoryview(bytearray(16))
    os.write(w, b"step 1 loss: 0.5\n")  # 17 bytes: more than the small buffer
    assert read_chunk(r, small, limit=1024) == b"step 1 loss: 0.5\n"
    os.write(w, b"short\n")
    assert read_chunk(r, small, limit=1024) == b"short\n"
    payload = bytes(range(256)) * 40  # 10 240 bytes
    os.write(w, payload)
    got = b""
    pieces = 0
    while len(got) < len(payload):
        got += read_chunk(r, small, limit=4096)
        pieces += 1
    assert got == payload and pieces == 3  # limit-sized pieces, nothing lost or reordered
    with pytest.raises(BlockingIOError):
        read_chunk(r, small)
    os.close(w)
    assert read_chunk(r, small) == b""  # the end
    os.close(r)
