"""What every room shares: checked frozen configs, atomic files, lanes, outcomes, the two clocks, daemon threads."""
