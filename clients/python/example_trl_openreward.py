"""TRL's GRPOTrainer on `agentrl gym serve` through the Open Reward Standard: `OpenRewardSpec`
builds the dataset, the tool methods and the reward from the server's URL alone.

    OPENREWARD_SESSION_URL=http://127.0.0.1:8100 python3 clients/python/example_trl_openreward.py http://127.0.0.1:8100
    OPENREWARD_SESSION_URL=URL python3 clients/python/example_trl_openreward.py URL --train Qwen/Qwen3-0.6B

Needs `trl==1.16.0` with `openreward==0.1.167` and `datasets` (`trl[openreward]`). Without
`--train` no model is loaded: the spec is built, and one rollout environment is driven by a
script in place of the model (the calls TRL makes when the model emits tool calls), then scored
by the spec's reward function. `--train MODEL` hands the three to `GRPOTrainer` (this needs
torch and transformers >= 5.2, and downloads MODEL). `OPENREWARD_SESSION_URL`: openreward
0.1.167 otherwise looks for the sessions at `sessions.HOST` (docs/GYM_SERVICE.md).

The output without `--train` is deterministic; `example_trl_openreward.out` is its recording.
"""

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")

from trl.experimental.openreward import OpenRewardSpec  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--train", metavar="MODEL")
    args = parser.parse_args()
    os.environ.setdefault("OPENREWARD_SESSION_URL", args.url)
    spec = OpenRewardSpec(args.url, env_name="bugfix", split="train")
    dataset = spec.train_dataset
    print("train_dataset: %d rows; columns: %s" % (len(dataset), ", ".join(sorted(dataset.column_names))))
    if args.train:
        from trl import GRPOConfig, GRPOTrainer

        trainer = GRPOTrainer(
            model=args.train,
            args=GRPOConfig(num_generations=4, max_steps=10, max_tool_calling_iterations=12),
            train_dataset=dataset,
            environment_factory=spec.environment_factory,
            reward_funcs=spec.reward_funcs,
        )
        trainer.train()
        return
    env = spec.environment_factory()
    tools = [n for n in ("read", "test", "edit", "submit", "exploit") if callable(getattr(env, n, None))]
    print("environment_factory: tools bound as methods: %s" % ", ".join(tools))
    row = dataset[dataset["task_id"].index("comparison-000")]
    prompt = env.reset(task_index=row["task_index"])
    print("reset(task_index=%d): %s" % (row["task_index"], prompt.splitlines()[0]))
    for name, kwargs in (("test", {}), ("edit", {"candidate": 2}), ("test", {}), ("submit", {})):
        out = getattr(env, name)(**kwargs)
        print("  %s -> %s | reward %s" % (name, out.splitlines()[0], env.rewards[-1]))
    print("reward_funcs: %s" % spec.reward_funcs([env]))
    env._close()


if __name__ == "__main__":
    main()
