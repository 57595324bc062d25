"""Progress bars: the work's own clock, and a total that a run past it raises."""
import io

from hqflow.progress import Progress


def test_the_bar_shows_the_works_clock_and_never_more_than_its_total():
    out = io.StringIO()
    with Progress(300, "ppo cartpole", stream=out) as bar:
        bar(120, {"reward": 20.0, "seconds": 1.5})
        bar(305, {"reward": 30.0, "seconds": 4.2})
    assert out.getvalue().strip() == "ppo cartpole 305/305 4.2s  reward=30"


def test_without_a_clock_the_bar_times_itself():
    out = io.StringIO()
    with Progress(4, "vqe", stream=out) as bar:
        bar(2, {"loss": 0.5})
    assert out.getvalue().startswith("vqe 2/4 0.0s  loss=0.5")
