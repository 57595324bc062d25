"""A user's own environment for the tests: registering it is what importing this module does.

A corridor of 5 cells; the agent starts in cell 0 and is rewarded 1 on reaching cell 4
(actions: 0 left, 1 right); 20 steps at most.
"""
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    def __init__(self, length: int = 5):
        self.length = length
        self.observation_space = gym.spaces.Discrete(length)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0
        return self.pos, {}

    def step(self, action):
        self.pos = int(np.clip(self.pos + (1 if int(action) == 1 else -1), 0, self.length - 1))
        done = self.pos == self.length - 1
        return self.pos, float(done), done, False, {}


if "Corridor-v0" not in gym.registry:
    gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20, reward_threshold=1.0)
