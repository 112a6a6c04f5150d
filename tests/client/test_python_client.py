"""tuned_gpu.Client (client/python/tuned_gpu) against the real daemon: a daemon of
this build on the cpu, on a private socket and cache, driven through
submit, status, wait, fetch (with a training run too), advance, watch
and cache_ls; its errors as their
types with the daemon's messages; the socket found as tunectl finds it.

usage: test_python_client.py TUNED LIBTUNED_CLIENT  (exit status 0: passed)
"""
import ctypes
import json
import os
import signal
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "client", "python"))
import tuned_gpu  # noqa: E402
from tuned_daemon import land_version, start_daemon  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
EXAMPLE = os.path.join(SOURCE, "examples", "gpt3_mlp_small.json")
TUNED, LIBTUNED_CLIENT = sys.argv[1:3]


class DaemonTest(unittest.TestCase):
    """One daemon for every test; the example is tuned once (4 trials)."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory(prefix="tuned-pyclient-")
        cls.daemon, cls.path = start_daemon(TUNED, cls.work.name)
        with open(EXAMPLE) as f:
            cls.graph = f.read()
        with tuned_gpu.Client(cls.path) as client:
            cls.submitted = client.submit(cls.graph, budget=120, trials=4)
            cls.ended = client.wait(cls.submitted["id"], timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.send_signal(signal.SIGTERM)
        cls.daemon.wait(30)
        cls.work.cleanup()

    def client(self):
        client = tuned_gpu.Client(self.path)
        self.addCleanup(client.close)
        return client

    def test_submit_returns_the_job(self):
        job = self.submitted
        self.assertIsInstance(job["id"], int)
        self.assertRegex(job["key"], "^[0-9a-f]{64}$")
        self.assertEqual(job["name"], "gpt3_mlp_small")
        self.assertIn(job["state"], ("queued", "running"))
        self.assertEqual(job["cached_version"], 0)

    def test_wait_returns_the_job_done(self):
        self.assertEqual(self.ended["id"], self.submitted["id"])
        self.assertEqual(self.ended["state"], "done", self.ended.get("error"))
        self.assertGreaterEqual(self.ended["progress"]["trials"], 1)

    def test_status_is_the_daemon_s_job(self):
        job = self.client().status(self.submitted["id"])
        self.assertEqual(job["key"], self.submitted["key"])
        self.assertEqual(job["state"], "done")
        self.assertEqual(job["progress"], self.ended["progress"])

    def test_fetch_by_job_and_by_key(self):
        client = self.client()
        by_job = client.fetch(job=self.submitted["id"])
        by_key = client.fetch(key=self.submitted["key"], min_version=1, timeout=5)
        self.assertEqual(by_job, by_key)
        self.assertEqual(by_job["key"], self.submitted["key"])
        self.assertGreaterEqual(by_job["version"], 1)
        self.assertTrue(by_job["plan"]["kernels"])
        self.assertEqual([s["kernel"] for s in by_job["sources"]],
                         [launch["kernel"] for launch in by_job["launch"]])

    def test_fetch_of_a_version_not_there_times_out(self):
        client = self.client()
        newest = client.fetch(key=self.submitted["key"])["version"]
        with self.assertRaises(tuned_gpu.TimedOutError) as caught:
            client.fetch(key=self.submitted["key"], min_version=newest + 100, timeout=0.2)
        self.assertEqual(caught.exception.code, "timeout")

    def test_ranks_of_a_run_get_one_version_until_it_advances(self):
        ranks = [self.client() for _ in range(3)]
        key = self.submitted["key"]
        pinned = ranks[0].fetch(key=key, run="py-run")
        self.assertEqual(pinned["run"], "py-run")
        land_version(self.work.name, key)
        latest = ranks[0].fetch(key=key)["version"]
        self.assertGreater(latest, pinned["version"])
        for rank in ranks:
            self.assertEqual(rank.fetch(key=key, run="py-run")["version"], pinned["version"])
        self.assertEqual(ranks[1].fetch(job=self.submitted["id"], run="py-other")["version"],
                         latest)
        advanced = ranks[2].advance("py-run")
        self.assertEqual(advanced, {"run": "py-run", "pins": [
            {"key": key, "version": latest, "previous": pinned["version"]}]})
        for rank in ranks:
            self.assertEqual(rank.fetch(key=key, run="py-run")["version"], latest)
        with self.assertRaises(tuned_gpu.NotFoundError) as caught:
            ranks[0].advance("py-never-fetched")
        self.assertIn("run 'py-never-fetched'", str(caught.exception))

    def test_cache_ls_lists_the_key(self):
        client = self.client()
        entries = client.cache_ls()
        mine = [e for e in entries if e["key"] == self.submitted["key"]]
        self.assertEqual(len(mine), 1, entries)
        self.assertEqual(mine[0]["name"], "gpt3_mlp_small")
        self.assertEqual(mine[0]["version"], client.fetch(job=self.submitted["id"])["version"])
        self.assertGreater(mine[0]["bytes"], 0)

    def test_watch_gives_the_events_of_the_key(self):
        """A watcher sees a second job of the key (submitted by another
        client) from its start to its end, and nothing of other keys."""
        watcher, submitter = self.client(), self.client()
        key = self.submitted["key"]
        watch = watcher.watch(key, timeout=120)
        self.assertEqual(watch.version, watcher.fetch(key=key)["version"])
        job = submitter.submit(json.loads(self.graph), budget=120, trials=4)
        self.assertNotEqual(job["id"], self.submitted["id"])
        names, states = set(), []
        for event in watch:
            self.assertIsInstance(event, tuned_gpu.Event)
            self.assertEqual(event.data["key"], key)
            names.add(event.name)
            if event.name == "job" and event.data["id"] == job["id"]:
                states.append(event.data["state"])
                if event.data["state"] in ("done", "failed", "cancelled"):
                    break
        self.assertEqual(states[-1], "done")
        self.assertIn("running", states)
        self.assertIn("progress", names)

    def test_submit_with_grad_returns_the_backward_graph_s_job(self):
        client = self.client()
        graph = {"version": 1, "name": "scale", "tensors": {
            "x": {"shape": [4, 8], "dtype": "f32", "role": "input"},
            "y": {"shape": [4, 8], "dtype": "f32", "role": "output"}},
            "ops": ["y[i, j] = 2 * x[i, j]"]}
        job = client.submit(graph, budget=1, trials=1, grad=("x",))
        backward = job["grad"]
        self.assertRegex(backward["key"], "^[0-9a-f]{64}$")
        self.assertNotEqual(backward["key"], job["key"])
        self.assertEqual(backward["name"], "scale_grad")
        self.assertEqual(backward["cached_version"], 0)
        tensors = json.loads(backward["graph"])["tensors"]
        self.assertEqual({n: t["role"] for n, t in tensors.items()},
                         {"x": "input", "d_y": "input", "d_x": "output"})
        with self.assertRaises(tuned_gpu.BadRequestError) as caught:
            client.submit(graph, grad=["y"])
        self.assertEqual(caught.exception.message,
                         "params.grad: cannot differentiate with respect to 'y': it is an "
                         "output, whose gradient is the input d_y")

    def test_a_bad_graph_is_a_bad_request_with_the_daemon_s_message(self):
        client = self.client()
        graph = {"version": 1, "tensors": {
            "x": {"shape": [4], "dtype": "f32", "role": "input"},
            "y": {"shape": [4], "dtype": "f32", "role": "output"}},
            "ops": ["y[i] = x[i, i]"]}
        with self.assertRaises(tuned_gpu.BadRequestError) as caught:
            client.submit(graph)
        error = caught.exception
        self.assertIsInstance(error, tuned_gpu.DaemonError)
        self.assertEqual(error.code, "bad_request")
        self.assertEqual(error.message, "params.graph: op 0, column 8: tensor 'x' has 1 "
                         "dims, indexed with 2")
        self.assertEqual(str(error), error.message)
        self.assertEqual(client.status(self.submitted["id"])["state"], "done")

    def test_an_unknown_job_or_key_is_not_found(self):
        client = self.client()
        with self.assertRaises(tuned_gpu.NotFoundError) as caught:
            client.status(987654)
        self.assertEqual(caught.exception.message, "no job 987654")
        with self.assertRaises(tuned_gpu.NotFoundError):
            client.fetch(key="0" * 64)
        with self.assertRaises(tuned_gpu.NotFoundError):
            client.wait(987654)
        with self.assertRaises(tuned_gpu.BadRequestError) as caught:
            client.fetch(key=self.submitted["key"], job=self.submitted["id"])
        self.assertEqual(caught.exception.message,
                         "params must have exactly one of key and job")

    def test_tuned_socket_names_the_daemon(self):
        saved = os.environ.get("TUNED_SOCKET")
        os.environ["TUNED_SOCKET"] = self.path
        try:
            self.assertEqual(tuned_gpu.default_socket(), self.path)
            with tuned_gpu.Client() as client:
                self.assertEqual(client.path, self.path)
                self.assertTrue(client.server.startswith("tuned "), client.server)
                self.assertEqual(client.status(self.submitted["id"])["id"],
                                 self.submitted["id"])
        finally:
            if saved is None:
                del os.environ["TUNED_SOCKET"]
            else:
                os.environ["TUNED_SOCKET"] = saved


class NoDaemonTest(unittest.TestCase):
    def test_nothing_listening_is_no_daemon(self):
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "gpu0.sock")
            with self.assertRaises(tuned_gpu.NoDaemonError) as caught:
                tuned_gpu.Client(path)
            self.assertEqual(str(caught.exception),
                             "no tuned daemon at %s (no such file or directory): start one "
                             "with 'tuned --backend auto --socket %s'" % (path, path))


def c_default_path():
    """tuned_client_default_path of the C client, in this environment."""
    lib = ctypes.CDLL(LIBTUNED_CLIENT)
    out = ctypes.create_string_buffer(4096)
    lib.tuned_client_default_path(out, ctypes.c_size_t(len(out)))
    return out.value.decode()


class DefaultSocketTest(unittest.TestCase):
    """default_socket() is the C client's rule, for root and (where root
    can become one) for a user: own daemon's socket in a folder of their
    own, in a folder open to others, with and without XDG_RUNTIME_DIR."""

    def compare(self, environment):
        saved = dict(os.environ)
        try:
            os.environ.pop("TUNED_SOCKET", None)
            os.environ.pop("XDG_RUNTIME_DIR", None)
            os.environ.update(environment)
            return tuned_gpu.default_socket(), c_default_path()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def cases(self, runtime):
        """Environments: TUNED_SOCKET set and empty, XDG_RUNTIME_DIR with
        the daemon's socket in a folder of the user's own and in one open
        to others, and without XDG_RUNTIME_DIR."""
        own = os.path.join(runtime, "own")
        open_to_all = os.path.join(runtime, "open")
        for folder, mode in ((own, 0o700), (open_to_all, 0o777)):
            os.makedirs(os.path.join(folder, "tuned"))
            os.chmod(os.path.join(folder, "tuned"), mode)
            open(os.path.join(folder, "tuned", "gpu0.sock"), "w").close()
        return [{"TUNED_SOCKET": "/somewhere/else.sock"}, {"TUNED_SOCKET": ""},
                {"XDG_RUNTIME_DIR": own}, {"XDG_RUNTIME_DIR": open_to_all},
                {"XDG_RUNTIME_DIR": os.path.join(runtime, "none")}, {}]

    def test_as_this_user(self):
        with tempfile.TemporaryDirectory() as runtime:
            for environment in self.cases(runtime):
                python, c = self.compare(environment)
                self.assertEqual(python, c, environment)

    @unittest.skipUnless(os.geteuid() == 0, "only root can become another user")
    def test_as_another_user(self):
        """In a child that became nobody: the same paths, and Client()
        refuses its own daemon's socket in a folder open to others."""
        child = os.fork()
        if child == 0:
            os._exit(self.child_as_nobody())
        _, status = os.waitpid(child, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0,
                         "the comparison as nobody failed (see above)")

    def child_as_nobody(self):
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with tempfile.TemporaryDirectory() as runtime:
                for environment in self.cases(runtime):
                    python, c = self.compare(environment)
                    if python != c:
                        print("FAIL as nobody: %s: python %s, c %s" % (environment, python, c))
                        return 1
                open_folder = {"XDG_RUNTIME_DIR": os.path.join(runtime, "open")}
                os.environ.update(open_folder)
                os.environ.pop("TUNED_SOCKET", None)
                if tuned_gpu.default_socket().startswith(runtime):
                    try:
                        tuned_gpu.Client()
                        print("FAIL as nobody: a socket in a folder open to all was used")
                        return 1
                    except tuned_gpu.UnauthorizedError as e:
                        if "its folder is not yours alone" not in str(e):
                            print("FAIL as nobody: %s" % e)
                            return 1
            return 0
        except BaseException as e:  # the child must not return into unittest
            print("FAIL as nobody: %r" % e)
            return 1


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
