"""The job service: circuits become jobs on pools of backends, with dispatch, retries, budgets and usage."""
