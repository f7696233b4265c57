"""The Spark options of issue 20 (``credentials``, ``tlsCaFile``, ``tlsVerify``, client
certificates) against a server with TLS on every port and auth on: the driver's planning
and commit and the executors' tasks all connect with them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from security.test_secure_setup import Secure, _secure_server  # tests/security
from segmentstore_client.spark.options import Access, OptionError

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    s = _secure_server(tmp_path_factory.mktemp("spark-secure"))
    yield s
    s.server.kill()


def _opts(s: Secure, **more: str) -> dict[str, str]:
    return {"endpoint": s.endpoint, "controller": s.controller, **more}


def test_credentials_and_tls_reach_driver_and_executors(spark: Any, secure: Secure) -> None:
    ok = _opts(secure, credentials="alice:alice-pw", tlsCaFile=secure.pki.ca_pem)
    df = spark.range(0, 5000, 1, 2).selectExpr("id", "cast(id * 2 as string) as v")
    df.write.format("segmentstore").options(**ok).option("segment", "app/spark/0").mode(
        "append"
    ).save()
    back = spark.read.format("segmentstore").options(**ok).option("segment", "app/spark/0")
    assert sorted(r.id for r in back.load().select("id").collect()) == list(range(5000))

    # a static token, and the store's certificate unchecked (the controller's gRPC
    # channel, which fetches the token, still checks it against the CA: an SDK limit)
    token = _opts(
        secure, credentials=secure.static_token, tlsVerify="false", tlsCaFile=secure.pki.ca_pem
    )
    again = spark.read.format("segmentstore").options(**token).option("segment", "app/spark/0")
    assert again.load().count() == 5000


def test_refusals_are_one_clear_line(spark: Any, secure: Secure) -> None:
    def read(**opts: str) -> Any:
        r = spark.read.format("segmentstore").options(**opts).option("segment", "app/spark/1")
        return r.load().count()

    with pytest.raises(Exception, match=r"(?i)auth|credential|token"):
        read(**_opts(secure, tlsCaFile=secure.pki.ca_pem))  # no credentials
    with pytest.raises(Exception, match=r"(?i)auth|password|credential|denied"):
        read(**_opts(secure, credentials="alice:wrong", tlsCaFile=secure.pki.ca_pem))
    with pytest.raises(Exception, match=r"(?i)certificate|ssl|tls"):
        read(**_opts(secure, credentials="alice:alice-pw"))  # the test CA is not trusted


def test_access_options_parse(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("x")
    a = Access.parse({"credentials": "u:p:q", "tlsCaFile": str(pem), "tlsVerify": "false"})
    assert a.credentials == ("u", "p:q") and a.tls_ca_file == str(pem) and not a.tls_verify
    assert Access.parse({"credentials": "tok123"}).credentials == "tok123"
    with pytest.raises(OptionError, match="no such file"):
        Access.parse({"tlsCaFile": str(tmp_path / "missing.pem")})
    with pytest.raises(OptionError, match="both 'tlsCertFile' and 'tlsKeyFile'"):
        Access.parse({"tlsCertFile": str(pem)})
    with pytest.raises(OptionError, match="the user is empty"):
        Access.parse({"credentials": ":pw"})
