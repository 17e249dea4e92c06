"""Which schema a DSN alone selects: ``schema=`` wins, else the DSN's ``-c runledger.schema=``, else runledger."""

from __future__ import annotations

import pytest

from runledger_beat.db import ConfigError, schema_of
from runledger_beat.settings import load


@pytest.mark.parametrize("dsn", [
    "host=db dbname=app options='-c search_path=t_1,public -c runledger.schema=t_1'",
    "host=db dbname=app options='-crunledger.schema=t_1'",
    "host=db dbname=app options='--runledger.schema=t_1'",
    "postgresql://u@db/app?options=-c%20runledger.schema%3Dt_1",
])
def test_the_dsn_names_the_schema(dsn):
    assert schema_of(dsn) == "t_1"
    assert schema_of(dsn, "explicit") == "explicit"


@pytest.mark.parametrize("dsn", [
    "postgresql://u@db/app",
    "host=db options='-c search_path=other,public'",  # a search_path alone keeps the default
    "",
])
def test_without_the_option_the_schema_is_runledger(dsn):
    assert schema_of(dsn) == "runledger"


def test_a_bad_name_in_the_dsn_is_refused_naming_the_option():
    with pytest.raises(ConfigError, match=r"runledger\.schema: 'x;drop' is not a plain SQL identifier"):
        schema_of("host=db options='-c runledger.schema=x;drop'")


def test_an_unparsable_dsn_is_left_to_connect_and_never_echoed():
    assert schema_of("postgresql://u:p%zz@db/app") == "runledger"


def test_beat_settings_follow_the_dsn_unless_runledger_schema_is_set():
    dsn = "postgresql://u@db/app?options=-c%20runledger.schema%3Dt_2"
    assert load({"runledger_dsn": dsn}).schema == "t_2"
    assert load({"runledger_dsn": dsn, "runledger_schema": "mine"}).schema == "mine"
    assert load({"runledger_dsn": "postgresql://u@db/app"}).schema == "runledger"
