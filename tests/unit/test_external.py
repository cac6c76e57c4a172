"""tests/external.py: a missing outside resource skips a test outside CI and fails it under CI (CI=true or 1),
saying where it looked."""

import pytest

from external import in_ci, missing_resource


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("1", pytest.fail.Exception),
                                         ("TRUE", pytest.fail.Exception), ("", pytest.skip.Exception),
                                         ("false", pytest.skip.Exception), (None, pytest.skip.Exception)])
def test_a_missing_resource_skips_only_outside_ci(monkeypatch, ci, outcome):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert in_ci() is (outcome is pytest.fail.Exception)
    with pytest.raises(outcome, match="looked in /nowhere/vectors"):
        missing_resource("test vectors", "/nowhere/vectors")
