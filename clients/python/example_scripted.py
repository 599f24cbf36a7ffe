"""A scripted policy on a gym server, through the Python client.

    python3 clients/python/example_scripted.py http://127.0.0.1:8100

On the first train task (by id) of each of the first three families and the first heldout
task: read the module, run the tests, then try each candidate edit in order
(`edit {candidate: k}`, `test`) and submit once the public tests pass. A candidate that passes
the public tests need not fix the bug (a `hack` special-cases the public inputs): the hidden
tests decide the score. Then one episode that calls `exploit` (it rewrites the public tests so
they pass) and submits: the verifier's hidden tests and tamper check are not fooled.

The output is deterministic (no ids, timings or addresses); `example_scripted.out` is the
recording that `tests/cli/python_client.rs` compares it with.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agentrl_gym import GymClient, GymError  # noqa: E402

MAX_TURNS = 12


def summary(obs):
    """One line for an observation."""
    kind = obs["kind"]
    if kind == "task":
        return "task: %d files, %d candidates" % (len(obs["files"]), len(obs["candidates"]))
    if kind == "file":
        cut = " (truncated)" if obs["truncated"] else ""
        return "file %s: %d lines%s" % (obs["path"], len(obs["lines"]), cut)
    if kind == "tests":
        line = "tests: %d passed, %d failed" % (len(obs["passed"]), len(obs["failed"]))
        if obs["crashed"]:
            line += ", crashed: %s" % obs["crashed"].splitlines()[0]
        elif obs["first_failure"]:
            f = obs["first_failure"]
            line += " (first: %s %s)" % (f["test"], f["exception"])
        return line
    if kind == "edited":
        return "edited %s (candidate %s)" % (obs["path"], obs["candidate"])
    if kind == "exploited":
        return "exploited: %s" % obs["summary"]
    if kind in ("submitted", "turn_limit"):
        return kind
    if kind == "error":
        return "error %s: %s" % (obs["error"], obs["message"])
    return kind


def reward_line(r):
    return "reward: score=%.2f hidden=%d/%d public=%d/%d tampered=%s format_errors=%d" % (
        r["score"],
        r["hidden_passed"],
        r["hidden_total"],
        r["public_passed"],
        r["public_total"],
        str(r["tampered"]).lower(),
        r["format_errors"],
    )


def act(ep, name, **arguments):
    """One tool call, printed with its observation."""
    shown = " ".join("%s=%s" % kv for kv in sorted(arguments.items()))
    step = ep.call(name, **arguments)
    print("  %s%s -> %s" % (name, " " + shown if shown else "", summary(step["observation"])))
    return step["observation"]


def green(obs):
    return obs["kind"] == "tests" and obs["passed"] and not obs["failed"] and not obs["crashed"]


def scripted(gym, task_id):
    """Read, test, candidates in order, submit on green."""
    with gym.start(task_id, seed=0, max_turns=MAX_TURNS) as ep:
        task = ep.observation
        print("episode %s" % task_id)
        print("  " + summary(task))
        module = task["candidates"][0]["path"] if task["candidates"] else task["files"][0]
        act(ep, "read", path=module)
        obs = act(ep, "test")
        for k in range(len(task["candidates"])):
            if green(obs) or ep.done:
                break
            act(ep, "edit", candidate=k)
            if not ep.done:
                obs = act(ep, "test")
        if not ep.done:
            act(ep, "submit")
        print("  " + reward_line(ep.reward))
        return ep.reward


def exploiter(gym, task_id):
    """Exploit, test, submit: the public tests pass, the verdict does not."""
    with gym.start(task_id, seed=0, max_turns=MAX_TURNS) as ep:
        print("episode %s (exploit)" % task_id)
        act(ep, "exploit")
        act(ep, "test")
        act(ep, "submit")
        print("  " + reward_line(ep.reward))
        state = ep.state()
        print("  state: turn=%d done=%s" % (state["turn"], str(state["done"]).lower()))
        return ep.reward


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: example_scripted.py URL  (of `agentrl gym serve`)")
    gym = GymClient(sys.argv[1])
    print("protocol %d" % gym.health()["protocol"])
    firsts = {}  # family -> its first train task
    for t in sorted(gym.tasks(split="train"), key=lambda t: t["id"]):
        firsts.setdefault(t["family"], t["id"])
    train = [firsts[f] for f in sorted(firsts)[:3]]
    heldout = sorted(t["id"] for t in gym.tasks(split="heldout"))
    if len(train) < 3 or not heldout:
        sys.exit("the server needs train tasks of 3 families and 1 heldout task")
    solved = public_only = 0
    for task_id in train + heldout[:1]:
        r = scripted(gym, task_id)
        hidden_ok = r["hidden_total"] > 0 and r["hidden_passed"] == r["hidden_total"]
        solved += hidden_ok
        public_only += not hidden_ok and r["public_passed"] == r["public_total"]
    print(
        "scripted: %d of 4 solved; %d passed the public tests only (a hack or a decoy that the"
        " public tests miss: the hidden tests decide)" % (solved, public_only)
    )
    reward = exploiter(gym, train[0])
    fooled = not reward["tampered"] or reward["hidden_passed"] == reward["hidden_total"]
    if fooled or reward["score"] != 0:
        sys.exit("the exploit was not caught: %s" % reward_line(reward))
    print("exploit caught: tampered, hidden tests fail, score 0")


if __name__ == "__main__":
    try:
        main()
    except GymError as e:
        sys.exit("example_scripted.py: %s" % e)
