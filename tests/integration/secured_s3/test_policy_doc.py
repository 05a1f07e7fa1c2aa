"""docs/secured-s3.md documents the policy the tests use: its JSON is ``least_privilege_policy``'s
for the page's example bucket and prefix, and its table names every action of the policy."""

from __future__ import annotations

import json
import re
from pathlib import Path

from twophase.integration.services.s3_tls import LEAST_PRIVILEGE_ACTIONS, least_privilege_policy

PAGE = Path(__file__).resolve().parents[3] / "docs" / "secured-s3.md"


def test_the_documented_policy_is_the_tested_one() -> None:
    text = PAGE.read_text()
    (block,) = re.findall(r"```json\n(.*?)```", text, re.DOTALL)
    assert json.loads(block) == least_privilege_policy("my-bucket", ["jobs/orders"])
    for action in LEAST_PRIVILEGE_ACTIONS:
        assert f"| `{action}` |" in text, action
