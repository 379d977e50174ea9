# Helpers only: functions that turn the validated config into file lists.


def all_outputs():
    """Every final artifact of the sweep (filled in as stages land)."""
    return []
