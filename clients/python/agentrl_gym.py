"""A client for the BugFix gym service (`agentrl gym serve`), standard library only.

The gym (Python bug-fix tasks; tools `read`, `test`, `edit`, `submit`, `exploit`; a verifier
with hidden tests and a tamper check) runs as an HTTP/JSON server; this module drives its
episodes from any Python 3.8+ program::

    from agentrl_gym import GymClient

    gym = GymClient("http://127.0.0.1:8100")        # key: api_key= or $AGENTRL_API_KEY
    with gym.start("comparison-000", max_turns=12) as ep:
        print(ep.observation["prompt"])              # the task observation
        ep.call("read", path="grading.py")           # one tool call = one turn
        ep.call("edit", candidate=2)
        ep.call("submit")
        print(ep.reward["score"], ep.reward["hidden_passed"], ep.reward["hidden_total"])

Other RL frameworks (TRL, verl, ...) use it as the environment of a multi-turn rollout: in the
custom rollout function (or agent loop) the framework lets you write, start an episode per
sample, render `ep.observation` into the conversation, sample the model's next message, parse
its tool call into `{"name": ..., "arguments": {...}}` (or send `malformed(raw, reason)` when it
does not parse: the gym counts a format error and the episode goes on), `ep.step(...)` it, and
repeat until `ep.done`; `ep.reward["score"]` is the episode's reward. Episodes are independent,
so a thread pool runs a batch of them at once (the server bounds its live episodes: a start
past the bound raises GymError with status 429 and `retry_after`).

Each step sends the episode's turn count, so a step resent after a lost answer is answered from
the server's record instead of being applied twice; `Episode.step` resends on its own after a
connection error. The protocol, every route and body: docs/GYM_SERVICE.md.
"""

import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["GymClient", "Episode", "GymError", "call", "malformed", "PROTOCOL"]

#: The protocol version this client speaks (`GET /health` reports the server's).
PROTOCOL = 1


class GymError(Exception):
    """A request that failed: `status` is the HTTP status (None when the server could not be
    reached), `message` the server's error message, `retry_after` its Retry-After seconds."""

    def __init__(self, status, message, retry_after=None):
        super().__init__("HTTP %s: %s" % (status, message) if status else message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def call(name, **arguments):
    """A tool-call action: `call("read", path="stats.py")`, `call("edit", candidate=1)`."""
    return {"kind": "call", "name": name, "arguments": arguments}


def malformed(raw, reason):
    """The action for model output that did not parse as a tool call (a format error)."""
    return {"kind": "malformed", "raw": raw, "reason": reason}


class GymClient:
    """One gym server. Thread-safe: every method is one independent HTTP request."""

    def __init__(self, url, api_key=None, timeout=300, retries=2):
        self.url = url.rstrip("/")
        if api_key is None:
            api_key = os.environ.get("AGENTRL_API_KEY") or None
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries

    def request(self, method, path, body=None):
        """Sends one request; returns the decoded JSON answer or raises GymError."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = text[:300] or e.reason
            try:
                retry = float(e.headers.get("Retry-After"))
            except (AttributeError, TypeError, ValueError):
                retry = None
            raise GymError(e.code, message, retry) from None
        except (urllib.error.URLError, socket.timeout, ConnectionError) as e:
            reason = getattr(e, "reason", e)
            raise GymError(None, "%s %s: %s" % (method, self.url + path, reason)) from None

    def health(self):
        """`{"status": "ok", "protocol": 1, "server": ...}`."""
        return self.request("GET", "/health")

    def load(self):
        """Live episodes, the bound, and counters since the server started."""
        return self.request("GET", "/v1/load")

    def tasks(self, split=None):
        """The tasks `[{"id", "family", "split", "fingerprint"}]`, of one split if given
        (`train`, `heldout`, `heldout-family`)."""
        query = "?" + urllib.parse.urlencode({"split": split}) if split else ""
        return self.request("GET", "/v1/tasks" + query)["tasks"]

    def start(self, task_id, seed=0, max_turns=None, reward=None):
        """Starts an episode of `task_id`. `max_turns` and `reward` (e.g.
        `{"kind": "public", "format_penalty": 0.0}`) default to the server's."""
        body = {"task_id": task_id, "seed": seed}
        if max_turns is not None:
            body["max_turns"] = max_turns
        if reward is not None:
            body["reward"] = reward
        answer = self.request("POST", "/v1/episodes", body)
        return Episode(self, answer)


class Episode:
    """One episode on a server. `observation` is the latest observation (a dict tagged by
    `kind`), `turn` the actions applied, `done` and `reward` (a dict once done, else None)."""

    def __init__(self, client, started):
        self.client = client
        self.id = started["episode_id"]
        self.task_id = started["task_id"]
        self.seed = started["seed"]
        self.turn = started["turn"]
        self.observation = started["observation"]
        self.done = False
        self.reward = None
        self.closed = False

    def step(self, action):
        """Applies one action: a dict `{"kind": "call", ...}` / `{"kind": "malformed", ...}`,
        or a bare tool call `{"name": ..., "arguments": {...}}`. Returns the step
        `{"observation", "done", "reward"}` and updates the episode's attributes."""
        if "kind" not in action:
            arguments = action.get("arguments") or {}
            action = {"kind": "call", "name": action["name"], "arguments": arguments}
        body = {"action": action, "turn": self.turn}
        path = "/v1/episodes/%s/step" % self.id
        for attempt in range(self.client.retries + 1):
            try:
                answer = self.client.request("POST", path, body)
                break
            except GymError as e:
                # Resending is safe: the turn makes the server answer a repeat from its record.
                if e.status is not None or attempt == self.client.retries:
                    raise
                time.sleep(0.5 * 2**attempt)
        step = answer["step"]
        self.turn = answer["turn"]
        self.observation = step["observation"]
        self.done = step["done"]
        self.reward = step["reward"]
        return step

    def call(self, name, **arguments):
        """`step(call(name, **arguments))`."""
        return self.step(call(name, **arguments))

    def state(self):
        """The server's record: `{"episode_id", "task_id", "seed", "turn", "done", "reward"}`."""
        return self.client.request("GET", "/v1/episodes/%s" % self.id)

    def close(self):
        """Frees the episode on the server (idempotent; an episode the server already reaped
        or closed is fine)."""
        if self.closed:
            return
        try:
            self.client.request("DELETE", "/v1/episodes/%s" % self.id)
        except GymError as e:
            if e.status != 404:
                raise
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except GymError:
            if exc_type is None:  # never hide the error that ended the block
                raise
        return False

    def __repr__(self):
        return "Episode(%s, task=%s, turn=%d, done=%s)" % (
            self.id,
            self.task_id,
            self.turn,
            self.done,
        )
