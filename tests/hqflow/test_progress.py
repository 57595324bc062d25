"""Progress bars: the work's own clock, and a total that a run past it raises."""
import io

from hqflow.cli.progress import Progress


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


def test_off_a_terminal_a_line_every_30_seconds_of_the_works_clock_with_the_time_left():
    """A log or a pipe saw nothing for minutes (issue 34, item 18): now a plain line now and then."""
    out = io.StringIO()
    with Progress(1000, "classifier", stream=out) as bar:
        for k in range(1, 101):
            bar(k, {"loss": 0.5, "seconds": k * 0.5})
    assert out.getvalue().splitlines() == ["classifier 60/1000 30.0s  loss=0.5 (about 7.83 min left)",
                                           "classifier 100/1000 50.0s  loss=0.5"]
