"""Hostile single-line values for the task-profile scripts: shell syntax that would run if anything evaluated it.

``{marker}`` in a template is replaced by a path; a test proves non-execution by that file never appearing.
"""

from __future__ import annotations

from hypothesis import strategies as st

LINE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\n\r"),
    max_size=300,
)
HOSTILE = st.one_of(
    LINE_TEXT,
    st.sampled_from(
        [
            "$(touch {marker})",
            "`touch {marker}`",
            "x; touch {marker}",
            "'; touch {marker}; '",
            '"$(touch {marker})"',
            "${IFS}$(touch {marker})",
            "a\\",
            "export EVIL=1",
            "print pwned",
            "%s%n%x",
        ]
    ),
    st.integers(min_value=1000, max_value=20000).map(lambda n: "V" * n),
)
