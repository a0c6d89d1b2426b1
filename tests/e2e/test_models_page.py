"""The app starts and shows the real spec registry in a browser."""

import pytest
from apphelpers import wait_idle

pytestmark = pytest.mark.browser


def test_models_page_lists_specs_and_backend_capabilities(app_server, page):
    page.goto(app_server.url + "/models")
    wait_idle(page)
    page.get_by_role("heading", name="Models").wait_for()
    table = page.locator("[data-testid='stTable']").first
    text = table.inner_text()
    assert "qwen2.5-7b-instruct" in text
    assert "gpt-4o-mini" in text
    # hf_local gives internals for local specs; the API-only spec has nothing on hf_local.
    row = table.locator("tr", has_text="qwen2.5-0.5b-instruct").inner_text()
    assert "hidden_states" in row and "attention" in row
    api_row = table.locator("tr", has_text="gpt-4o-mini").inner_text()
    assert "hidden_states" not in api_row and "—" in api_row
