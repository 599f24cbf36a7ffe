"""The ecosystem's own clients against `agentrl gym serve`: OpenEnv and the Open Reward Standard.

    python3 clients/python/check_protocols.py URL [--tasks DIR] [--capacity N]

Run by `.ci/run` against a real server (started with `--max-episodes N`, given as
`--capacity`), with the pinned `openenv` and `trl[openreward]` (see `clients/python/
requirements-protocols.txt`). Every check uses the packages' own client classes, never ours:
- OpenEnv (`URL/openenv`): `openenv validate --url` exits 0 (run by `.ci/run`);
  `GenericEnvClient` runs a scripted fix (the task's fix candidate, read from its task.toml)
  to reward 1.0 with every hidden test passed; `MCPToolClient` lists the tools and runs an
  exploit episode to 0 with `tampered`; the same seed twice gives identical observations; a
  session past `--capacity` gets `CAPACITY_REACHED`.
- ORS (`URL`): TRL's `OpenRewardSpec` builds the dataset, binds the tools, and scores the same
  two episodes (1.0 and 0 with `tampered`) through its rollout environment.

The output is deterministic; `check_protocols.out` is its recording.
"""

import argparse
import asyncio
import os
import sys
import tomllib

TASK = "comparison-000"
HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = os.path.join(HERE, "..", "..", "crates", "agentrl-gym", "tasks", "builtin")


def fix_of(tasks_dir, task_id):
    """The task's fix candidate as (path, old, new), from its task.toml."""
    with open(os.path.join(tasks_dir, task_id, "task.toml"), "rb") as f:
        task = tomllib.load(f)
    for c in task["candidates"]:
        if c.get("role") == "fix":
            return (c["path"], c["old"], c["new"])
    sys.exit("%s has no fix candidate" % task_id)


def candidate_index(candidates, fix):
    for k, c in enumerate(candidates):
        if (c["path"], c["old"], c["new"]) == fix:
            return k
    sys.exit("the fix candidate is not among the episode's candidates")


def verdict_line(v):
    return "score=%.2f hidden=%d/%d public=%d/%d tampered=%s" % (
        v["score"],
        v["hidden_passed"],
        v["hidden_total"],
        v["public_passed"],
        v["public_total"],
        str(v["tampered"]).lower(),
    )


def check(ok, what):
    if not ok:
        sys.exit("FAILED: %s" % what)


def openenv_checks(url, fix, capacity):
    from openenv.core.generic_client import GenericEnvClient
    from openenv.core.mcp_client import MCPToolClient
    from openenv.core.env_server.mcp_types import CallToolAction

    base = url + "/openenv"
    # A scripted fix through the generic client: reward 1.0, every hidden test passed.
    with GenericEnvClient(base_url=base).sync() as env:
        result = env.reset(task_id=TASK, max_turns=8)
        obs = result.observation
        check(result.reward is None and not result.done, "no reward at reset")
        print("openenv reset %s: %d candidates" % (obs["task_id"], len(obs["candidates"])))
        k = candidate_index(obs["candidates"], fix)
        for action in (
            {"type": "call_tool", "tool_name": "test", "arguments": {}},
            {"type": "call_tool", "tool_name": "edit", "arguments": {"candidate": k}},
            {"type": "call_tool", "tool_name": "test", "arguments": {}},
        ):
            step = env.step(action)
            data = step.observation["result"]["data"]
            check(step.reward is None and "verdict" not in (step.metadata or {}),
                  "no reward or verdict before submit")
            print("  %s -> %s" % (action["tool_name"], data["kind"]))
        step = env.step({"type": "call_tool", "tool_name": "submit", "arguments": {}})
        verdict = step.metadata["verdict"]
        print("  submit -> done=%s reward=%.2f %s" % (step.done, step.reward, verdict_line(verdict)))
        check(step.done and step.reward == 1.0, "the scripted fix scores 1.0")
        check(verdict["hidden_passed"] == verdict["hidden_total"] > 0, "every hidden test passes")
        state = env.state()
        print("  state: step_count=%d" % state["step_count"])

    # The exploit through OpenEnv's MCP tool client: 0, tampered.
    async def exploit():
        async with MCPToolClient(base_url=base) as env:
            await env.reset(task_id=TASK)
            tools = await env.list_tools()
            print("openenv mcp tools: %s" % ", ".join(t.name for t in tools))
            check(all(t.input_schema.get("type") == "object" for t in tools), "tool schemas")
            data = await env.call_tool("exploit")
            print("  exploit -> %s" % data["kind"])
            data = await env.call_tool("test")
            print("  test -> %d passed, %d failed" % (len(data["passed"]), len(data["failed"])))
            step = await env.step(CallToolAction(tool_name="submit", arguments={}))
            verdict = step.metadata["verdict"]
            print("  submit -> done=%s reward=%.2f %s" % (step.done, step.reward, verdict_line(verdict)))
            check(step.reward == 0 and verdict["tampered"], "the exploit scores 0, tampered")

    asyncio.run(exploit())

    # The same seed twice: the same task, the same observations.
    runs = []
    for _ in range(2):
        with GenericEnvClient(base_url=base).sync() as env:
            first = env.reset(split="train", seed=7).observation
            second = env.step({"type": "call_tool", "tool_name": "test", "arguments": {}}).observation
            runs.append((first, second))
    check(runs[0] == runs[1], "the same seed twice gives identical observations")
    print("openenv seed 7 twice: %s, identical observations" % runs[0][0]["task_id"])

    # Capacity: sessions past --max-episodes get CAPACITY_REACHED.
    async def capacity_check():
        clients = [GenericEnvClient(base_url=base) for _ in range(capacity + 1)]
        opened, refused = [], None
        try:
            for c in clients:
                await c.connect()
                opened.append(c)
            for c in clients:
                try:
                    await c.reset(task_id=TASK)
                except Exception as e:  # noqa: BLE001 - the client raises a plain error
                    refused = str(e)
        finally:
            for c in opened:
                try:
                    await c.close()
                except Exception:  # noqa: BLE001
                    pass
        check(refused is not None and "CAPACITY_REACHED" in refused, "capacity: %r" % refused)
        print("openenv session %d of %d: CAPACITY_REACHED" % (capacity + 1, capacity))

    asyncio.run(capacity_check())


def ors_checks(url, fix):
    from trl.experimental.openreward import OpenRewardSpec

    spec = OpenRewardSpec(url, env_name="bugfix", split="train")
    dataset = spec.train_dataset
    print("ors dataset: %d rows, columns %s" % (len(dataset), ", ".join(sorted(dataset.column_names))))
    index = dataset["task_id"].index(TASK)
    env = spec.environment_factory()
    tools = sorted(n for n in ("read", "test", "edit", "submit", "exploit") if callable(getattr(env, n, None)))
    print("ors bound tools: %s" % ", ".join(tools))
    check(len(tools) == 5, "every tool bound")

    prompt = env.reset(task_index=index)
    check(isinstance(prompt, str) and prompt, "a prompt")
    # The episode's candidates: the prompt block's detail holds the task observation.
    first = env._session.get_prompt()[0].detail["observation"]
    k = candidate_index(first["candidates"], fix)
    env.test()
    check(env.reward is None, "no reward before submit")
    env.edit(candidate=k)
    env.test()
    env.submit()
    print("ors fix episode: reward=%.2f finished=%s" % (env.reward, env.finished))
    check(env.reward == 1.0 and env.finished, "ORS scores the fix 1.0")
    check(spec.reward_funcs([env]) == [1.0], "reward_funcs gives 1.0")
    env._close()

    env = spec.environment_factory()
    env.reset(task_index=index)
    env.exploit()
    env.test()
    env.submit()
    print("ors exploit episode: reward=%.2f finished=%s" % (env.reward, env.finished))
    check(env.reward == 0 and env.finished, "ORS scores the exploit 0")
    env._close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--only", choices=["openenv", "ors"])
    args = parser.parse_args()
    url = args.url.rstrip("/")
    fix = fix_of(args.tasks, TASK)
    if args.only in (None, "openenv"):
        openenv_checks(url, fix, args.capacity)
    if args.only in (None, "ors"):
        ors_checks(url, fix)
    print("ok")


if __name__ == "__main__":
    main()
