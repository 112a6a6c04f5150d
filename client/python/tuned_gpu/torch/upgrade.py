"""The upgrader: one thread of the package per daemon socket, which
follows the daemon for the partitions of optimized modules.

It submits each partition's graph (once; with the inputs to
differentiate, for a module that trains, so the daemon tunes its
backward graph too), watches its keys, and on each new version fetches
the plan and loads it, off the calls' path, then hands it to the
partition, which runs it from its next call. A module of a training run
(optimize's `run`) fetches the version the run is pinned to: its first
version, then only what advance() or sync() fetch, in the caller's
thread, so every rank runs one version of each key. When the
daemon goes away it tells the partitions why, and connects again, every
BACKOFF_MAX_S seconds at most; meanwhile each partition keeps the plan
it runs, or runs in torch.
"""
import threading
import time
import weakref

from ..client import Client
from ..errors import (BadRequestError, NotFoundError, TimedOutError, TooLargeError,
                      TunedError, UnknownOpError)
from ..plan import Plan

BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 5.0
POLL_S = 0.1  # how often the thread looks for new partitions between events
# What a backward graph reads saved by the forward plan rather than
# recomputes (docs/autodiff.md, "Saved or recomputed").
SAVE = "auto"
# The daemon's refusals of a graph: submitting it again gets the same.
REFUSALS = (BadRequestError, UnknownOpError, TooLargeError)
UNREACHABLE = "the tuned daemon is unreachable"


def unreachable(error):
    """Why a partition is not served while the daemon cannot be reached."""
    return "%s (%s); reconnecting every %g s at most" % (UNREACHABLE, error, BACKOFF_MAX_S)


class Followed:
    """One graph of a partition, its forward graph or its backward graph:
    the graph, its key once submitted and the version it was given."""

    def __init__(self, direction, graph, key=None):
        self.direction, self.graph, self.key = direction, graph, key
        self.version = 0


class Entry:
    """A partition followed: its budget, the backend its plans load for,
    the inputs its backward graph differentiates (`wrt`), and its graphs
    (Followed: the forward one, then the backward one once submitted)."""

    def __init__(self, partition, budget, backend, run=None):
        self.partition = weakref.ref(partition)
        self.budget, self.backend, self.wrt = budget, backend, partition.wrt
        self.run = run  # the training run whose pinned versions it runs, or None
        self.graphs = [Followed("forward", partition.graph)]
        self.refused = False
        self.watched = False
        # one load of its plans at a time: the thread's load of a first
        # version cannot land after a sync() in the caller's thread (and
        # undo an advance)
        self.loading = threading.Lock()

    def takes(self, followed, version):
        """Whether a version of one of its keys, announced, is fetched:
        any newer one; for a run only the first, which the run pins (it
        moves on at advance())."""
        return version > followed.version and (self.run is None or followed.version == 0)

    @property
    def key(self):
        return self.graphs[0].key

    def tell(self, why):
        """Sets why tuned does not serve the partition (None: it does)."""
        partition = self.partition()
        if partition is not None:
            partition.trouble = why


class Upgrader:
    """Follows the daemon at `socket` (None: as Client finds it)."""

    def __init__(self, socket):
        self.socket = socket
        self._entries = []
        self._lock = threading.Lock()
        self._outage = None   # the thread's: why it lost the daemon (its first reason)
        self._thread = None

    def start_following(self, entries):
        """Submits the entries and loads the plans their keys have cached,
        in the caller's thread so that the first call runs them; the
        thread then follows them."""
        try:
            with Client(self.socket) as client:
                for entry in entries:
                    self._follow(client, entry)
        except TunedError as e:
            for entry in entries:
                entry.tell(unreachable(e))
        with self._lock:
            self._entries += entries
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="tuned_gpu upgrader")
                self._thread.start()

    def _follow(self, client, entry):
        """Submits the entry's graph (and its backward graph), and gives
        its partition the keys' plans when the cache has them."""
        job = self._submit(client, entry)
        if job is None:
            return
        forward = entry.graphs[0]
        forward.key = job["key"]
        if "graph" in job:  # the forward graph that saves for the backward one
            forward.graph = job["graph"]
        cached = [(forward, job["cached_version"])]
        partition = entry.partition()
        if partition is not None:
            partition.key = forward.key
        if "grad" in job:
            backward = Followed("backward", job["grad"]["graph"], job["grad"]["key"])
            entry.graphs.append(backward)
            cached.append((backward, job["grad"]["cached_version"]))
            if partition is not None:
                partition.grad_key = backward.key
        for followed, version in cached:
            if entry.takes(followed, version):
                self._upgrade(client, entry, followed)

    @staticmethod
    def _submit(client, entry):
        """The entry's job, with its backward graph's where it has inputs
        to differentiate; a backward graph the daemon refuses is told to
        the partition (which then differentiates in torch) and the graph
        submitted alone; None when the daemon refuses the graph."""
        try:
            if entry.wrt:
                try:
                    return client.submit(entry.graphs[0].graph, budget=entry.budget,
                                         grad=entry.wrt, save=SAVE)
                except REFUSALS as e:
                    why = "the daemon refused its backward graph: %s" % e
                    partition = entry.partition()
                    if partition is not None:
                        partition.backward_trouble = why
            return client.submit(entry.graphs[0].graph, budget=entry.budget)
        except REFUSALS as e:
            entry.refused = True
            entry.tell("the daemon refused its graph: %s" % e)
            return None

    def _upgrade(self, client, entry, followed):
        """Fetches the best plan of one of the entry's keys and loads it for
        the partition; a plan that does not load is not tried again."""
        with entry.loading:
            self._load(client, entry, followed)

    @staticmethod
    def _load(client, entry, followed):
        fetched = client.fetch(key=followed.key, run=entry.run)
        if fetched["version"] == followed.version:
            return  # a run's pin, not moved
        followed.version = fetched["version"]
        try:
            plan = Plan(followed.graph, fetched, entry.backend)
        except TunedError as e:
            why = "plan version %d fails to load: %s" % (followed.version, e)
            if followed.direction == "forward":
                entry.tell(why)
            elif entry.partition() is not None:
                entry.partition().backward_trouble = "backward " + why
            return
        partition = entry.partition()
        if partition is not None:
            partition.use(plan, followed.version, followed.direction)

    def _lost(self, error):
        """The thread lost the daemon: each partition is told why (the
        first failure's reason, for the whole outage), and its key is
        watched again once the daemon is back."""
        with self._lock:
            if self._outage is None:
                self._outage = unreachable(error)
            for entry in self._entries:
                entry.watched = False
                entry.tell(self._outage)

    def _run(self):
        delay = BACKOFF_FIRST_S
        while True:
            try:
                with Client(self.socket) as client:
                    self._outage = None
                    delay = BACKOFF_FIRST_S
                    self._serve(client)
            except Exception as e:  # the process outlives whatever befalls tuned
                self._lost(e)
            time.sleep(delay)
            delay = min(2 * delay, BACKOFF_MAX_S)

    def _serve(self, client):
        """Watches the keys of new partitions (and of all after a
        reconnection), and upgrades on each new version."""
        while True:
            with self._lock:
                self._entries = [e for e in self._entries if e.partition() is not None]
                entries = list(self._entries)
            for entry in entries:
                if not entry.watched and not entry.refused:
                    self._watch(client, entry)
            try:
                event = client.next_event(timeout=POLL_S)
            except TimedOutError:
                continue
            if event.name == "version":
                self._on_version(client, entries, event.data)

    def _on_version(self, client, entries, data):
        """A version event: the entries of its key that take it upgrade."""
        for entry in entries:
            for followed in entry.graphs:
                if followed.key == data.get("key") and \
                        entry.takes(followed, data.get("version", 0)):
                    self._upgrade(client, entry, followed)

    def sync(self, entries):
        """Loads, in the caller's thread, the versions the entries' run is
        pinned to now: the next calls run them (the keys with no version
        yet excepted)."""
        with Client(self.socket) as client:
            for entry in entries:
                for followed in entry.graphs:
                    if followed.key is not None:
                        self._sync_one(client, entry, followed)

    def _sync_one(self, client, entry, followed):
        """Loads the version one key is pinned to; a key with no version
        yet is left to the thread, which pins its first when it comes."""
        try:
            self._upgrade(client, entry, followed)
        except (NotFoundError, TimedOutError):
            if followed.version:
                raise

    def advance(self, run, entries):
        """Moves `run` to the latest version of the entries' keys that it
        has pinned, then loads them (sync); the pins moved."""
        keys = [f.key for e in entries for f in e.graphs if f.key is not None and f.version]
        with Client(self.socket) as client:
            moved = client.advance(run, keys) if keys else {"run": run, "pins": []}
        self.sync(entries)
        return moved

    def _watch(self, client, entry):
        """Follows the entry's keys; a version published before the watch
        is fetched at once."""
        if entry.key is None:
            self._follow(client, entry)
            if entry.refused:
                return
        for followed in entry.graphs:
            if entry.takes(followed, client.call("watch", {"key": followed.key})["version"]):
                self._upgrade(client, entry, followed)
        entry.watched = True
        partition = entry.partition()
        if partition is not None and (partition.trouble or "").startswith(UNREACHABLE):
            partition.trouble = None


_upgraders = {}
_upgraders_lock = threading.Lock()


def upgrader(socket):
    """The process's upgrader for the daemon at `socket`."""
    with _upgraders_lock:
        if socket not in _upgraders:
            _upgraders[socket] = Upgrader(socket)
        return _upgraders[socket]
