"""Passwords never leave in a redacted DSN, an error text or a Celery config dump; the host always does."""

from __future__ import annotations

import psycopg
import pytest
from celery import Celery
from celery.app.utils import filter_hidden_settings

from runledger_beat import db
from runledger_beat.db import redaction
from runledger_beat.db.redaction import dsn_has_password, read_dsn_file, redact_dsn, safe_error

HOST = "db.example.com"


def _clean(text: str, *secrets: str, host: str = HOST) -> None:
    """No secret anywhere in ``text``; the host still there."""
    for secret in secrets:
        assert secret not in text, text
    assert host in text, text


def _connect_error(dsn: str) -> psycopg.Error:
    """The error psycopg/libpq raises for this DSN (nothing listens on port 1)."""
    with pytest.raises(psycopg.Error) as info:
        psycopg.connect(dsn, connect_timeout=2)
    return info.value


def test_db_still_exports_the_redaction_helpers():
    assert db.redact_dsn is redact_dsn and db.safe_error is safe_error
    assert db.dsn_has_password is dsn_has_password and db.read_dsn_file is read_dsn_file


def test_url_userinfo_password():
    dsn = f"postgresql://app:s3cretpw@{HOST}:5432/prod"
    assert redact_dsn(dsn) == f"postgresql://app:***@{HOST}:5432/prod"
    _clean(safe_error(RuntimeError(f"cannot reach {dsn}: s3cretpw rejected"), dsn), "s3cretpw")
    _clean(safe_error(RuntimeError(f"cannot reach {dsn}")), "s3cretpw")  # no DSN given: the URL pattern alone


@pytest.mark.parametrize("dsn", [f"postgresql://app@{HOST}/prod?password=qs3cret",
                                 f"postgresql://app@{HOST}/prod?sslmode=require&password=qs3cret",
                                 f"postgresql://app@{HOST}/prod?password=qs3cret&sslmode=require"])
def test_url_query_password(dsn):
    redacted = redact_dsn(dsn)
    _clean(redacted, "qs3cret")
    assert "password=***" in redacted and ("sslmode=require" in redacted) == ("sslmode" in dsn)
    _clean(safe_error(ValueError(f"bad {dsn}"), dsn), "qs3cret")
    _clean(safe_error(ValueError(f"bad {dsn}")), "qs3cret")


@pytest.mark.parametrize(("dsn", "password", "fragments"), [
    (f"host={HOST} user=app password=kvs3cret dbname=prod", "kvs3cret", []),
    (f"host={HOST} password = 'se cret9' dbname=prod", "se cret9", ["cret9'"]),
    (f"host={HOST} password='it\\'s s3cr\\\\et' dbname=prod", "it's s3cr\\et", ["it\\'s", "s3cr"]),
    (f"host={HOST} sslpassword=keyphrase password=pw2s3cret", "pw2s3cret", ["keyphrase"]),
    (f"host={HOST} password='unterminated s3cret", "unterminated s3cret", ["unterminated"]),
])
def test_key_value_password(dsn, password, fragments):
    _clean(redact_dsn(dsn), password, *fragments)
    assert dsn_has_password(dsn)
    _clean(safe_error(RuntimeError(f"connect {dsn} failed; password was {password}"), dsn), password, *fragments)


def test_percent_encoded_password_both_forms():
    dsn = f"postgresql://app:p%40ss%2Fw0rd@{HOST}/prod"
    _clean(redact_dsn(dsn), "p%40ss", "p@ss")
    text = safe_error(RuntimeError(f"auth failed for p@ss/w0rd (given as p%40ss%2Fw0rd) at {HOST}"), dsn)
    _clean(text, "p@ss/w0rd", "p%40ss%2Fw0rd", "p@ss")


def test_libpq_echo_of_a_raw_percent_in_the_password():
    dsn = f"postgresql://app:pa%ssw0rd@{HOST}:1/prod"
    exc = _connect_error(dsn)
    assert "pa%ssw0rd" in str(exc)  # libpq quotes the bad token: the password itself
    _clean(safe_error(exc, dsn) + " " + redact_dsn(dsn), "pa%ssw0rd", "ssw0rd")


def test_libpq_echo_of_spaces_and_of_the_whole_dsn():
    spaced = f"postgresql://app:sec ret9@{HOST}/prod"
    exc = _connect_error(spaced)
    assert "sec ret9" in str(exc)
    _clean(safe_error(exc, spaced) + " " + redact_dsn(spaced), "sec ret9", "ret9")
    broken = "postgresql://app:wh0le9@[::1/prod"  # libpq quotes the whole URI
    exc = _connect_error(broken)
    assert "wh0le9" in str(exc)
    _clean(safe_error(exc, broken), "wh0le9", host="::1")


def test_real_connection_failure_with_a_password():
    dsn = "postgresql://app:r3alpw@127.0.0.1:1/prod?connect_timeout=2"
    exc = _connect_error(dsn)
    _clean(safe_error(exc, dsn) + " " + redact_dsn(dsn), "r3alpw", host="127.0.0.1")


def test_dsn_has_password():
    assert dsn_has_password(f"postgresql://u:x@{HOST}/d") and dsn_has_password(f"postgresql://u@{HOST}/d?password=x")
    assert dsn_has_password(f"host={HOST} password=x") and dsn_has_password("postgresql://u:pa%ss@h/d")
    assert not dsn_has_password(f"postgresql://u@{HOST}/d") and not dsn_has_password(f"host={HOST} user=u")
    assert not dsn_has_password("") and not dsn_has_password(f"postgresql://{HOST}:5432/d")


def test_read_dsn_file(tmp_path):
    path = tmp_path / "dsn"
    path.write_text(f"\n   \n  postgresql://u:filepw@{HOST}/d  \nsecond line\n")
    assert read_dsn_file(path) == f"postgresql://u:filepw@{HOST}/d"
    path.write_text("\n \n")
    with pytest.raises(db.ConfigError, match="holds no DSN"):
        read_dsn_file(path)
    with pytest.raises(db.ConfigError, match="cannot read") as info:
        read_dsn_file(tmp_path / "missing")
    assert "filepw" not in str(info.value)


def test_celery_config_dumps_hide_runledger_dsn():
    import runledger_beat.settings  # noqa: F401 - registers the hidden pattern

    dsn = f"postgresql://app:c3lerypw@{HOST}/prod"
    app = Celery("redaction", set_as_current=False)
    app.conf.update(runledger_dsn=dsn, runledger_schema="runledger", RUNLEDGER_DSN=dsn)
    text = app.conf.humanize(with_defaults=False, censored=True)
    assert "runledger_dsn: '********'" in text and "runledger_schema: 'runledger'" in text
    assert "c3lerypw" not in text and "c3lerypw" not in str(app.conf.table(censored=True))
    assert filter_hidden_settings({"runledger_dsn": dsn})["runledger_dsn"] == "********"
    assert "c3lerypw" in app.conf.humanize(with_defaults=False, censored=False)  # only the censored views mask
    redaction.hide_dsn_settings()  # idempotent
    assert filter_hidden_settings({"sentry_dsn": dsn})["sentry_dsn"] == "********"
