"""A SkyRL-gym environment over `agentrl gym serve`'s OpenEnv routes: registered by id, made by
`skyrl_gym.make`, stepped with the model's text.

    python3 clients/python/example_skyrl.py http://127.0.0.1:8100

Needs `pip install skyrl-gym==0.4.0 openenv==0.10.0` (no model). `BugFixTextEnv` is a
`BaseTextEnv`: `init` resets an OpenEnv session (the task from the prompt's `extras`) and
returns the task as the first user turn; `step(text)` parses one tool call written as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen's format), sends it as an
MCP-shaped `call_tool`, and answers the observation's text as the next user turn, with the
reward on the final step only. In a SkyRL run, register it the same way in the trainer's entry
point and name `agentrl-bugfix` as the environment class of the dataset.

The output is deterministic; `example_skyrl.out` is its recording.
"""

import json
import re
import sys

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>", re.S)


class BugFixTextEnv(BaseTextEnv):
    """The BugFix gym as a SkyRL text environment (one OpenEnv session per episode)."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        from openenv.core.generic_client import GenericEnvClient

        env_config = env_config or {}
        self.extras = extras or {}
        self.max_turns = int(self.extras.get("max_turns", env_config.get("max_turns", 10)))
        self.client = GenericEnvClient(base_url=env_config["base_url"]).sync()
        self.client.connect()

    def init(self, prompt):
        result = self.client.reset(task_id=self.extras["task_id"], max_turns=self.max_turns)
        task = {"role": "user", "content": result.observation["text"]}
        return list(prompt) + [task], {"task_id": self.extras["task_id"]}

    def step(self, action):
        self.turns += 1
        match = TOOL_CALL.search(action)
        call = json.loads(match.group(1)) if match else {"name": "", "arguments": {}}
        result = self.client.step(
            {"type": "call_tool", "tool_name": call["name"], "arguments": call.get("arguments", {})}
        )
        text = result.observation["result"]["text"]
        return {
            "observations": [] if result.done else [{"role": "user", "content": text}],
            "reward": result.reward if result.done else 0.0,
            "done": result.done,
            "metadata": result.metadata or {},
            "postprocessed_action": action,
        }

    def close(self):
        self.client.close()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: example_skyrl.py URL  (of `agentrl gym serve`)")
    skyrl_gym.register(id="agentrl-bugfix", entry_point=BugFixTextEnv)
    env = skyrl_gym.make(
        "agentrl-bugfix",
        env_config={"base_url": sys.argv[1].rstrip("/") + "/openenv"},
        extras={"task_id": "comparison-000", "max_turns": 8},
    )
    conversation, info = env.init([{"role": "system", "content": "Fix the bug with the tools."}])
    print("registered agentrl-bugfix; init: %d messages, task %s" % (len(conversation), info["task_id"]))
    print("  first line: %s" % conversation[-1]["content"].splitlines()[0])
    for text in (
        '<tool_call>{"name": "test", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "edit", "arguments": {"candidate": 2}}</tool_call>',
        '<tool_call>{"name": "test", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
    ):
        out = env.step(text)
        shown = out["observations"][0]["content"].splitlines()[0] if out["observations"] else "-"
        print("  %s -> done=%s reward=%.2f %s" % (json.loads(TOOL_CALL.search(text).group(1))["name"], out["done"], out["reward"], shown))
    verdict = out["metadata"]["verdict"]
    print("verdict: hidden %d/%d tampered=%s" % (verdict["hidden_passed"], verdict["hidden_total"], str(verdict["tampered"]).lower()))
    env.close()


if __name__ == "__main__":
    main()
