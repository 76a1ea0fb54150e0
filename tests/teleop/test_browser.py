"""End to end in a real headless browser (Debian's chromium via Selenium, nothing downloaded).

``rewind-teleop`` serves a tiny Lift policy under a calibration that alarms at once, with auto-pause.
The server has a token, from ``REWIND_TELEOP_TOKEN`` (the page passes it on to every request). The
test opens the page, waits for the alarm (paused), reloads the page (a new page attaches to the
running session), rewinds by clicking the start checkpoint in ``drive`` mode, takes over with ``T``,
holds ``D`` for a correction, ends the episode as a success, and reads the store back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rewind.store import ReplayStore

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "e2e-secret"


def _browser():  # noqa: ANN202 (selenium types)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1100",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def _start_server(tmp_path: Path, weights: Path, calibration: Path) -> tuple[subprocess.Popen, str]:
    out = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "rewind.scripts.teleop",
        "env=lift",
        f"policy_path={weights}",
        f"calibration={calibration}",
        f"store={tmp_path / 'store'}",
        "port=0",
        f"out_dir={out}",
        "max_episodes=1",
        "pre_intervention_steps=2",
        "num_threads=1",
    ]
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa"), "REWIND_TELEOP_TOKEN": TOKEN}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while not (out / "server.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"rewind-teleop did not start:\n{proc.communicate()[0]}")
        time.sleep(0.2)
    info = json.loads((out / "server.json").read_text())
    assert info["token_required"] and "token" not in info["url"]  # the token is in no file
    return proc, info["url"] + f"?token={TOKEN}"


@pytest.mark.skipif(
    not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
    reason="chromium / chromium-driver not installed "
    "(apt-get install chromium chromium-driver; .ci/run does)",
)
def test_alarm_rewind_correct_commit_in_browser(
    tmp_path: Path, tiny_weights: Path, alarm_calibration: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    proc, url = _start_server(tmp_path, tiny_weights, alarm_calibration)
    # the page passes the token of its URL on to its stream, state events and commands
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 60)
        banner = (By.CSS_SELECTOR, "#mode-banner[data-mode='paused']")
        driver.get(url)
        wait.until(ec.presence_of_element_located(banner))
        wait.until(ec.text_to_be_present_in_element((By.ID, "alarm-strip"), "ALARM"))
        assert "> threshold" in driver.find_element(By.ID, "alarm-strip").text  # the session's alarm text
        driver.refresh()  # a new page attaches to the running, paused session
        wait.until(ec.presence_of_element_located(banner))
        assert "alarm" in driver.find_element(By.ID, "mode-reason").text
        wait.until(lambda d: d.execute_script("return document.getElementById('view').naturalWidth") == 256)

        Select(driver.find_element(By.ID, "rewind-mode")).select_by_value("drive")
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#timeline button.checkpoint"))).click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "mode-reason"), "rewound to 'start'"))

        body = driver.find_element(By.TAG_NAME, "body")
        ActionChains(driver).send_keys_to_element(body, "t").perform()
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#mode-banner[data-mode='human']")))
        ActionChains(driver).key_down("d").pause(1.0).key_up("d").perform()
        wait.until(ec.text_to_be_present_in_element((By.ID, "ep-labels"), '"human"'))

        driver.find_element(By.ID, "btn-success").click()
        output = proc.communicate(timeout=60)[0]
        log = driver.get_log("browser")  # no script error (no gamepad connected, a reload, the server ending)
        assert not [e for e in log if e["level"] == "SEVERE" and e["source"] != "network"], log
    finally:
        driver.quit()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    with ReplayStore.open(tmp_path / "store") as store:
        (ep,) = store.episodes()
        labels = store.load(ep.id).source_names
    assert ep.success is True and ep.seed == 0 and ep.extra["teleop"] is True
    assert {"policy", "pre_intervention", "recovery", "human"} <= set(ep.source_counts), ep.source_counts
    assert ep.n_operator_steps == ep.source_counts["recovery"] + ep.source_counts["human"]
    first_human = labels.index("human")
    assert labels[:2] == ["policy", "policy"] and set(labels[first_human:]) == {"human"}
    kinds = [e["kind"] for e in ep.extra["events"]]
    assert "alarm" in kinds and "rewind" in kinds
