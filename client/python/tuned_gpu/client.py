"""A client of the tuned daemon: protocol version 1 (docs/protocol.md) over
its Unix socket, in the standard library alone.

    with Client() as client:
        job = client.submit(open("graph.json").read(), budget=60)
        client.wait(job["id"])
        kernel = client.fetch(job=job["id"])

Results are the protocol's objects as Python dicts and lists (a job, a
kernel, cache entries: docs/protocol.md names their fields); events are
Event(name, data). Every error the daemon answers with is raised as the
DaemonError subclass of its code, with the daemon's message.
"""
import collections
import errno
import grp
import json
import os
import socket as _socket
import stat
import time

from . import errors

SYSTEM_SOCKET_DIR = "/run/tuned-gpu"
SYSTEM_SOCKET = SYSTEM_SOCKET_DIR + "/gpu0.sock"
PROTOCOL_VERSION = 1
TIMEOUT_DEFAULT_S = 30.0
EVENTS_MAX = 1024  # events queued; older ones are dropped
ENDED = ("done", "failed", "cancelled")

Event = collections.namedtuple("Event", "name data")
Event.__doc__ = """An event of the daemon: its name ("job", "progress",
"generation", "version") and its data (docs/protocol.md, "Events")."""


def _own_daemon_path():
    """Where a daemon that this user started listens by default."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return runtime + "/tuned/gpu0.sock"
    return "/tmp/tuned-%d/gpu0.sock" % os.getuid()


def _own_folder(path):
    """Whether the folder of "path" is this user's alone (a folder, not a
    link, owned by the user, that neither group nor others may write):
    only then can no one else have put a socket there."""
    try:
        st = os.lstat(os.path.dirname(path) or ".")
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _daemon_path():
    """The daemon reached without being told: root's is the system
    service; a user's is their own daemon when its socket is there in a
    folder of their own, else the service's when it is installed, else
    their own daemon's place."""
    if os.geteuid() == 0:
        return SYSTEM_SOCKET
    own = _own_daemon_path()
    there = os.access(own, os.F_OK) and _own_folder(own)
    if not there and os.access(SYSTEM_SOCKET_DIR, os.F_OK):
        return SYSTEM_SOCKET
    return own


def default_socket():
    """The socket of the daemon of GPU 0, as tunectl and the C client find
    it (tuned_client_default_path): $TUNED_SOCKET when set and not empty;
    else root's system service, /run/tuned-gpu/gpu0.sock; for others,
    their own daemon's ($XDG_RUNTIME_DIR/tuned/gpu0.sock, or
    /tmp/tuned-<uid>/gpu0.sock) when its socket is there in a folder of
    their own, else the service's when it is installed, else their own."""
    return os.environ.get("TUNED_SOCKET") or _daemon_path()


def _refuse_untrusted_default(path):
    """The default path, not named by $TUNED_SOCKET, is this user's own
    daemon's and something is there in a folder not theirs alone: a
    client runs the code a daemon hands it, so it does not connect."""
    if (os.environ.get("TUNED_SOCKET") or path != _own_daemon_path()
            or not os.access(path, os.F_OK) or _own_folder(path)):
        return
    st = os.lstat(os.path.dirname(path))
    raise errors.UnauthorizedError(
        "not connecting to %s: its folder is not yours alone (owner uid %d, "
        "mode %04o), so another user may have put the socket there; remove the "
        "folder, or name the socket with TUNED_SOCKET"
        % (path, st.st_uid, stat.S_IMODE(st.st_mode)))


def _reason(error):
    """The OS's message for "error", lowercase, as the C client writes it."""
    text = os.strerror(error.errno) if error.errno else str(error)
    return text[:1].lower() + text[1:]


def _connect_error(path, error):
    """The error for a connect to "path" that failed with "error"."""
    why = _reason(error)
    if error.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR):
        if path == _daemon_path():
            how = "'tuned --backend auto' or 'systemctl start tuned-gpu@0'"
        else:
            how = "'tuned --backend auto --socket %s'" % path
        return errors.NoDaemonError("no tuned daemon at %s (%s): start one with %s"
                                    % (path, why, how))
    if error.errno in (errno.EACCES, errno.EPERM):
        return errors.UnauthorizedError("cannot connect to tuned at %s (%s): %s"
                                        % (path, why, _way_in(path)))
    return errors.ProtocolError("cannot connect to tuned at %s (%s)" % (path, why))


def _way_in(path):
    """How a user refused a socket gets in: the group its folder admits."""
    try:
        st = os.stat(os.path.dirname(path) or ".")
        if st.st_mode & stat.S_IXGRP and st.st_gid != 0:
            group = grp.getgrgid(st.st_gid).gr_name
            return ("join the group '%s' (sudo usermod -aG %s $USER) and log in again"
                    % (group, group))
    except (OSError, KeyError):
        pass
    return "ask for its allow_uids or allow_gids to name you"


class Client:
    """One connection to a daemon, which says hello on connecting.

    socket: the socket path; None for default_socket(). timeout: the
    seconds connecting and each call wait for their reply (None: no
    limit); a fetch or a wait adds its own. Not thread-safe: one thread
    at a time, or one Client per thread.
    """

    def __init__(self, socket=None, timeout=TIMEOUT_DEFAULT_S):
        if socket is None:
            socket = default_socket()
            _refuse_untrusted_default(socket)
        self.path = socket
        self.timeout = timeout
        self._events = collections.deque(maxlen=EVENTS_MAX)
        self._buffer = bytearray()
        self._last_id = 0
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(socket)
        except _socket.timeout:
            self.close()
            raise errors.TimedOutError("tuned at %s accepts no connection within %g s "
                                       "(its backlog is full)" % (socket, timeout)) from None
        except OSError as e:
            self.close()
            raise _connect_error(socket, e) from None
        try:
            hello = self.call("hello", {"version": PROTOCOL_VERSION})
        except errors.TunedError:
            self.close()
            raise
        if hello.get("version") != PROTOCOL_VERSION:
            self.close()
            raise errors.ProtocolError("the daemon at %s answered hello with version %r, "
                                       "not %d" % (socket, hello.get("version"),
                                                   PROTOCOL_VERSION))
        self.server = hello.get("server", "")

    def close(self):
        """Closes the connection; queued events are dropped."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, op, params=None, extra_s=0):
        """Sends the request "op" with "params" and returns its result,
        waiting the client's timeout plus "extra_s"; events that come
        meanwhile are queued. Raises the daemon's error as its type."""
        if self._sock is None:
            raise errors.ProtocolError("the connection to %s is closed" % self.path)
        self._last_id += 1
        request = {"id": self._last_id, "op": op}
        if params:
            request["params"] = params
        deadline = self._deadline(extra_s)
        line = json.dumps(request, separators=(",", ":")) + "\n"
        try:
            self._sock.settimeout(self._left(deadline, "sending '%s'" % op))
            self._sock.sendall(line.encode())
        except _socket.timeout:
            raise self._timed_out("sending '%s'" % op, deadline) from None
        except OSError as e:
            raise errors.ProtocolError("cannot send '%s' to tuned at %s (%s)"
                                       % (op, self.path, _reason(e))) from None
        while True:
            reply = self._read_message(deadline, "a reply to '%s'" % op)
            if reply is not None and reply.get("id") == self._last_id:
                if "error" in reply:
                    raise errors.daemon_error(reply["error"])
                return reply.get("result")
            # a reply to an earlier call that ran out of time: dropped

    def submit(self, graph, budget=None, priority=None, trials=None, grad=None,
               save=None):
        """Submits "graph" (graph.json as text or as a dict) to be tuned for
        "budget" seconds (None: the daemon's default), with "priority" and
        at most "trials" trials. Returns the job, with "cached_version";
        the job's events come to this client from then on. With "grad"
        (tensor names), the daemon also tunes the backward graph with
        respect to them (docs/autodiff.md): the job's "grad" is that
        graph's job, with its "cached_version" and its "graph" (the
        backward graph.json text). With "save" ("none", "auto", "all"),
        the backward graph reads those forward results saved, and the job
        is that of the forward graph that also outputs them, whose
        graph.json text is the job's "graph" (absent: nothing saved)."""
        params = {"graph": graph}
        for name, value in (("budget", budget), ("priority", priority), ("trials", trials),
                            ("grad", None if grad is None else list(grad)),
                            ("save", save)):
            if value is not None:
                params[name] = value
        return self.call("submit", params)

    def status(self, job):
        """The job "job" (an id) as the daemon has it now."""
        return self.call("status", {"job": job})

    def wait(self, job, timeout=None):
        """Waits until the job "job" ends and returns it: its "state" is
        done, failed (with its "error") or cancelled. timeout: seconds
        (None: no limit), then TimedOutError. Watches the job's key."""
        deadline = self._deadline(timeout, base=0)
        current = self.status(job)
        if current["state"] in ENDED:
            return current
        self.call("watch", {"key": current["key"]})
        current = self.status(job)  # it may have ended before the watch
        while current["state"] not in ENDED:
            event = self._next_event(deadline, "the end of job %d" % job,
                                     lambda e: e.name == "job" and e.data.get("id") == job)
            current = event.data
        return current

    def fetch(self, key=None, job=None, min_version=None, timeout=None, run=None):
        """The best kernel of the key "key" or of the job "job" (exactly one),
        of version at least "min_version", waiting up to "timeout" seconds
        for one (None: answer at once): {key, version, device, median_ms,
        spread_ms, plan, sources, launch}, which Plan loads.

        With "run" (a training run's id), the version the run is pinned
        to instead: the key's latest at the run's first fetch of it, the
        same for every rank of the run, however many land after it, until
        the run advances (advance()); the result has "run" too. A key
        with no version yet waits up to "timeout" for its first, which
        the run then pins. "min_version" cannot go with "run"."""
        params = {name: value for name, value in (("key", key), ("job", job))
                  if value is not None}  # the daemon refuses both, or neither
        if min_version is not None:
            params["min_version"] = min_version
        if timeout is not None:
            params["timeout_ms"] = int(timeout * 1000)
        if run is not None:
            params["run"] = run
        return self.call("fetch", params, extra_s=timeout or 0)

    def advance(self, run, keys=None):
        """Moves training run "run" to the latest version of the keys it
        has fetched (or of "keys", pinning those it had not): every
        rank's fetch with the run gets those from then on. Call it from
        one rank, at a step boundary, then have the ranks fetch again.
        Returns {run, pins: [{key, version, previous}]} ("previous" 0 for
        a key pinned now); NotFoundError for a run that fetched nothing or
        a key listed with no version."""
        params = {"run": run}
        if keys is not None:
            params["keys"] = list(keys)
        return self.call("advance", params)

    def watch(self, key, timeout=None):
        """Subscribes to the events of the key "key" (it need not be known
        yet) and returns a Watch: an iterator of its events, without end.
        timeout: the most seconds to wait for each event (None: no limit),
        then TimedOutError."""
        result = self.call("watch", {"key": key})
        return Watch(self, key, result["version"], timeout)

    def next_event(self, timeout=None):
        """The next event of any key this client watches or job it
        submitted, queued or coming: for one thread that follows many
        keys. timeout: seconds (None: no limit), then TimedOutError."""
        deadline = self._deadline(timeout, base=0)
        return self._next_event(deadline, "an event", lambda e: True)

    def cache_ls(self):
        """The daemon's cache: one entry per key, device and code generator,
        {key, name, version, device, codegen, median_ms, updated_at, bytes}."""
        return self.call("cache.list")["entries"]

    def _deadline(self, extra_s, base=None):
        """A wait of the client's timeout (or "base") plus "extra_s"
        seconds: (when it ends on the monotonic clock, its seconds), or
        None for no limit."""
        base = self.timeout if base is None else base
        if base is None or extra_s is None:
            return None
        return (time.monotonic() + base + extra_s, base + extra_s)

    def _left(self, deadline, what):
        """The seconds left before "deadline", for socket.settimeout."""
        if deadline is None:
            return None
        left = deadline[0] - time.monotonic()
        if left <= 0:
            raise self._timed_out(what, deadline)
        return left

    def _timed_out(self, what, deadline):
        return errors.TimedOutError("no %s from the daemon at %s within %g s"
                                    % (what, self.path, deadline[1]))

    def _next_event(self, deadline, what, wanted):
        """The first queued or coming event that "wanted" accepts; the
        others stay queued in order."""
        while True:
            for i, event in enumerate(self._events):
                if wanted(event):
                    del self._events[i]
                    return event
            self._read_message(deadline, what)

    def _read_message(self, deadline, what):
        """Reads one message: returns a reply, or queues an event and
        returns None. A closing error (id null) is raised."""
        line = self._read_line(deadline, what)
        try:
            message = json.loads(line)
        except ValueError as e:
            raise errors.ProtocolError("the daemon at %s sent a line that is not JSON "
                                       "(%s): %.200r" % (self.path, e, line)) from None
        if not isinstance(message, dict):
            raise errors.ProtocolError("the daemon at %s sent a line that is not an "
                                       "object: %.200r" % (self.path, line))
        if "event" in message:
            self._events.append(Event(message["event"], message.get("data") or {}))
            return None
        if message.get("id") is None and "error" in message:
            self.close()
            raise errors.daemon_error(message["error"])
        return message

    def _read_line(self, deadline, what):
        """The next line of the daemon that holds something."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                if line.strip():
                    return line
                continue
            if self._sock is None:
                raise errors.ProtocolError("the connection to %s is closed" % self.path)
            try:
                self._sock.settimeout(self._left(deadline, what))
                chunk = self._sock.recv(1 << 16)
            except _socket.timeout:
                raise self._timed_out(what, deadline) from None
            except OSError as e:
                raise errors.ProtocolError("cannot read from tuned at %s (%s)"
                                           % (self.path, _reason(e))) from None
            if not chunk:
                self.close()
                raise errors.ProtocolError("the daemon at %s closed the connection"
                                           % self.path)
            self._buffer += chunk


class Watch:
    """The events of a key, Event(name, data), as they come: iterate, and
    break out when done. "version" is the key's best version when the
    watch began (0 for none)."""

    def __init__(self, client, key, version, timeout):
        self.key = key
        self.version = version
        self._client = client
        self._timeout = timeout

    def __iter__(self):
        return self

    def __next__(self):
        deadline = self._client._deadline(self._timeout, base=0)
        return self._client._next_event(deadline, "an event of key %s" % self.key,
                                        lambda e: e.data.get("key") == self.key)
