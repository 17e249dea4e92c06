"""Signed fires: the key setting, the signature, and beat refusing a key too short to be one."""

from __future__ import annotations

import pytest
from celery import Celery

from runledger_beat import settings, signing
from runledger_beat.errors import ConfigError

KEY = "k" * signing.MIN_KEY_LENGTH


def _conf(**values) -> object:
    app = Celery("signing-test", set_as_current=False)
    app.conf.update(runledger_dsn="postgresql://nobody@127.0.0.1:1/none", **values)
    return app.conf


def test_the_key_comes_from_the_setting_else_the_environment(monkeypatch):
    monkeypatch.delenv(signing.ENV, raising=False)
    assert signing.key_from(_conf()) is None and settings.load(_conf()).signed is False
    assert signing.key_from(_conf(runledger_signing_key=KEY)) == KEY.encode()
    monkeypatch.setenv(signing.ENV, "e" * 40)
    assert signing.key_from(_conf()) == b"e" * 40
    assert signing.key_from(_conf(runledger_signing_key=KEY)) == KEY.encode()  # the setting first
    assert settings.load(_conf()).signed is True


@pytest.mark.parametrize("value", ["short secret value", 12345678901234567890123456789012345, "x" * 31])
def test_a_key_that_is_not_32_characters_of_text_stops_beat_without_showing_it(monkeypatch, value):
    monkeypatch.delenv(signing.ENV, raising=False)
    with pytest.raises(ConfigError) as info:
        settings.load(_conf(runledger_signing_key=value))
    message = str(info.value)
    assert message.startswith("runledger_signing_key: expected a string of at least 32 characters")
    assert str(value) not in message


def test_a_signature_binds_the_ledger_id_the_task_and_the_key():
    sig = signing.sign(KEY.encode(), "0190e0a0-0000-7000-8000-000000000001", "proj.report")
    assert len(sig) == 64 and int(sig, 16) >= 0
    assert signing.verify(KEY.encode(), "0190e0a0-0000-7000-8000-000000000001", "proj.report", sig)
    for ledger_id, task, key in (("0190e0a0-0000-7000-8000-000000000002", "proj.report", KEY),
                                 ("0190e0a0-0000-7000-8000-000000000001", "proj.noop", KEY),
                                 ("0190e0a0-0000-7000-8000-000000000001", "proj.report", "j" * 32)):
        assert not signing.verify(key.encode(), ledger_id, task, sig)
    for bad in (None, 1, "", sig.upper(), sig[:-1], "é" * 64):
        assert not signing.verify(KEY.encode(), "0190e0a0-0000-7000-8000-000000000001", "proj.report", bad)
