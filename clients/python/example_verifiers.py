"""verifiers' OpenEnvTaskset over `agentrl gym serve` (prime-rl trains on verifiers tasksets).

    python3 clients/python/example_verifiers.py http://127.0.0.1:8100

Needs `pip install 'verifiers[openenv]==0.4.0'` (its pinned MCP 2 makes pip pick OpenEnv 0.4.1
for it, so it gets a venv of its own; no account and no model). The taskset is configured with
the server's OpenEnv base URL and one `reset` per task; loading it makes the tasks, and a
scripted episode runs through the same OpenEnv client class the taskset's env steps with
(`openenv.GenericEnvClient`) and the schema request it makes first. In a verifiers eval or a
prime-rl run the model plays instead of the script, e.g.

    vf-eval ... --env.taskset.base_url http://HOST:8100/openenv ...

The output is deterministic; `example_verifiers.out` is its recording.
"""

import asyncio
import json
import sys
import urllib.request

from verifiers.v1.tasksets.openenv import OpenEnvConfig, OpenEnvTaskset

TASKS = ["comparison-000", "intdiv-000", "edgecase-000"]


async def scripted_episode(base_url, reset):
    from openenv import GenericEnvClient

    with urllib.request.urlopen(base_url + "/schema") as r:
        schema = json.load(r)["action"]
    print("action schema: %s" % schema["title"])
    async with GenericEnvClient(base_url=base_url) as client:
        tools = (await client.step({"type": "list_tools"})).observation["tools"]
        print("tools before reset: %s" % ", ".join(t["name"] for t in tools))
        result = await client.reset(**reset)
        print("reset %s: %d candidates" % (result.observation["task_id"], len(result.observation["candidates"])))
        total = 0.0
        # What a model answering to the CallToolAction schema sends (`type` may be left out).
        for action in ({"tool_name": "exploit", "arguments": {}}, {"tool_name": "submit", "arguments": {}}):
            result = await client.step(action)
            total += result.reward or 0.0
            print("  %s -> done=%s reward=%s" % (action["tool_name"], result.done, result.reward))
        print("openenv_reward (verifiers sums the steps'): %.2f" % total)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: example_verifiers.py URL  (of `agentrl gym serve`)")
    base_url = sys.argv[1].rstrip("/") + "/openenv"
    config = OpenEnvConfig(base_url=base_url, resets=[{"task_id": t, "max_turns": 8} for t in TASKS])
    tasks = list(OpenEnvTaskset(config).load())
    print("taskset: %d tasks" % len(tasks))
    for task in tasks:
        print("  %s reset=%s" % (task.data.name.replace(base_url, "URL"), json.dumps(task.data.reset, sort_keys=True)))
    asyncio.run(scripted_episode(base_url, tasks[0].data.reset))


if __name__ == "__main__":
    main()
