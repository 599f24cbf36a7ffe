"""TRL's GRPOTrainer on `agentrl gym serve` through OpenEnv: an `environment_factory` class whose
methods are the gym's tools, each a `call_tool` on an OpenEnv session (OpenEnv's own
`GenericEnvClient`, base URL `URL/openenv`).

    python3 clients/python/example_trl_openenv.py http://127.0.0.1:8100
    python3 clients/python/example_trl_openenv.py URL --train Qwen/Qwen3-0.6B

Needs `openenv==0.10.0`; `--train MODEL` needs `trl==1.16.0` with torch and transformers >= 5.2
(and downloads MODEL). Without `--train` no model is loaded: one environment is driven by a
script in place of the model (the calls TRL makes when the model emits tool calls). The gym's
reward is the environment's `get_reward` (TRL scores each rollout with it); an episode the model
left unfinished is submitted there, as the gym's turn limit would.

The output without `--train` is deterministic; `example_trl_openenv.out` is its recording.
"""

import argparse

from openenv.core.generic_client import GenericEnvClient

URL = "http://127.0.0.1:8100"


class BugFixEnv:
    """One rollout: one OpenEnv session of the BugFix gym."""

    def __init__(self, base_url=None):
        self.client = GenericEnvClient(base_url=(base_url or URL).rstrip("/") + "/openenv").sync()
        self.client.connect()
        self.done, self.reward = False, None

    def reset(self, task_id, **_row):
        """Starts the dataset row's task; the task text is appended to the prompt."""
        result = self.client.reset(task_id=task_id, max_turns=12)
        self.done, self.reward = False, None
        return result.observation["text"]

    def _call(self, name, **arguments):
        if self.done:
            return "the episode is over"
        result = self.client.step({"type": "call_tool", "tool_name": name, "arguments": arguments})
        self.done = result.done
        if result.done:
            self.reward = result.reward
        return result.observation["result"]["text"]

    def read(self, path: str) -> str:
        """Show a file of the task workspace with line numbers.

        Args:
            path: Path relative to the workspace root.
        """
        return self._call("read", path=path)

    def test(self) -> str:
        """Run the public tests and report which pass and the first failure."""
        return self._call("test")

    def edit(self, candidate: int) -> str:
        """Apply a numbered candidate edit from the task.

        Args:
            candidate: Index of a candidate edit from the task.
        """
        return self._call("edit", candidate=candidate)

    def submit(self) -> str:
        """Finish the episode; hidden tests decide the reward."""
        return self._call("submit")

    def get_reward(self) -> float:
        if not self.done:
            self._call("submit")
        return self.reward


def main():
    global URL
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--train", metavar="MODEL")
    args = parser.parse_args()
    URL = args.url
    if args.train:
        import json
        import urllib.request

        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        with urllib.request.urlopen(URL + "/v1/tasks?split=train") as r:
            ids = [t["id"] for t in json.load(r)["tasks"]]
        dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Fix the bug."}]] * len(ids), "task_id": ids})
        GRPOTrainer(
            model=args.train,
            args=GRPOConfig(num_generations=4, max_steps=10, max_tool_calling_iterations=12),
            train_dataset=dataset,
            environment_factory=BugFixEnv,
        ).train()
        return
    env = BugFixEnv()
    print("reset: %s" % env.reset(task_id="comparison-000").splitlines()[0])
    print("  test -> %s" % env.test().splitlines()[0])
    print("  edit(candidate=2) -> %s" % env.edit(candidate=2).splitlines()[0])
    print("  test -> %s" % env.test().splitlines()[0])
    print("get_reward (submits): %.2f" % env.get_reward())
    env.reset(task_id="intdiv-000")
    print("an unfinished episode, scored: %.2f" % env.get_reward())
    env.client.close()


if __name__ == "__main__":
    main()
