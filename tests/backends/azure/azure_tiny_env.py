"""A tiny environment for training runs on the loopback job service (imported by test_backend.py's ``hqflow
train`` runs, with this folder on the path): one binary feature, two actions, and three steps an episode."""
import gymnasium as gym


class Blink(gym.Env):
    """The observation is the last action; reward 1 for repeating it; three steps an episode."""

    def __init__(self):
        self.observation_space, self.action_space, self.last = gym.spaces.Discrete(2), gym.spaces.Discrete(2), 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.last = 0
        return self.last, {}

    def step(self, action):
        reward = float(int(action) == self.last)
        self.last = int(action)
        return self.last, reward, False, False, {}


if "Blink-v0" not in gym.registry:
    gym.register("Blink-v0", entry_point=Blink, max_episode_steps=3)
