"""Planning: profiles of measured runs, the cost model (the engine on a simulated clock) and the planner."""
