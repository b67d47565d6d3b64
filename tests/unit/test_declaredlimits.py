"""expect.limits (pytest_slurmflox/model/declaredlimits.py): what a target declares its cluster may loosen, Slurm's
defaults where it is silent, read through the schema and written back by the one serializer."""

from __future__ import annotations

import copy

import pytest
from targetdocs import EVERY_KEY

from pytest_slurmflox.model.declaredlimits import DeclaredLimits, limits_document, parse_limits
from pytest_slurmflox.model.target import TargetError, parse_target, target_document


def test_a_silent_target_is_held_to_slurms_defaults_and_says_so():
    limits = parse_limits(None)
    assert limits == DeclaredLimits(0, 100.0, 0.0, True)
    assert limits.shown("over_time_limit") == "not declared (expect.limits.over_time_limit; Slurm's default 0 holds)"
    assert limits_document(limits) is None


def test_declared_limits_parse_show_and_round_trip_through_the_target_document():
    spec = parse_target(EVERY_KEY)
    assert spec.limits.over_time_limit == 8 and spec.limits.allowed_ram_space == 1000.0
    assert spec.limits.constrain_swap_space is False
    assert spec.limits.shown("allowed_ram_space") == "declared expect.limits.allowed_ram_space=1000"
    assert parse_target(target_document(spec)).limits == spec.limits
    only = parse_limits({"over_time_limit": 3})
    assert only.given == {"over_time_limit"} and limits_document(only) == {"over_time_limit": 3}


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ({"over_time_limit": -1}, r"expect\.limits\.over_time_limit: -1 must be at least 0"),
        ({"over_time_limit": "UNLIMITED"}, r"expect\.limits\.over_time_limit: 'UNLIMITED' is text"),
        ({"allowed_ram_space": "1000%"}, r"expect\.limits\.allowed_ram_space: '1000%' is text, expected a number"),
        ({"constrain_swap_space": "no"}, r"expect\.limits\.constrain_swap_space: 'no' is text, expected true or"),
        ({"overtime": 3}, r"expect\.limits\.overtime is not a known key \(did you mean expect\.limits\.over_time"),
    ],
)
def test_a_wrong_limit_is_refused_naming_its_path(limits, said):
    doc = copy.deepcopy(EVERY_KEY)
    doc["expect"]["limits"] = limits
    with pytest.raises(TargetError, match=said):
        parse_target(doc)


def test_the_parser_alone_refuses_what_the_schema_would():
    """parse_limits is also the parser's guard where no schema ran (a document built in code)."""
    with pytest.raises(ValueError, match="whole minutes"):
        parse_limits({"over_time_limit": 1.5})
    with pytest.raises(ValueError, match="not a known limit"):
        parse_limits({"min_ram_space": 30})
