"""ACLs kept in a table segment: grants an admin changes at run time, durably.

Contract: the table ``ACL_TABLE`` (``_system/_auth/acls``, created at start when auth is
on) maps a user name (UTF-8 key) to an ACL in the password file's syntax
(``prn::/scope:S/*,READ_UPDATE;...``). ``AclTable.acl_of(name)`` reads it; the controller
merges it over the password file's ACL when it issues a token (the table wins per
resource). Only the admin role can write it: the table lives in scope ``_system``, so the
segment store's own token check asks for a grant matching ``prn::/scope:_system/...``
(``prn::*``). An entry that does not parse grants nothing and is logged.
"""

from __future__ import annotations

import logging
from typing import Final

from ..storage import SegmentNotFound
from ..tables import TableStore
from .passwords import parse_acl
from .tokens import Permission

__all__ = ["ACL_TABLE", "AclTable"]

ACL_TABLE: Final = "_system/_auth/acls"
log = logging.getLogger("segmentstore.auth")


class AclTable:
    def __init__(self, tables: TableStore) -> None:
        self._tables = tables

    @classmethod
    async def open(cls, tables: TableStore) -> AclTable:
        try:
            await tables.info(ACL_TABLE)
        except SegmentNotFound:
            await tables.create(ACL_TABLE)
        return cls(tables)

    async def acl_of(self, name: str) -> dict[str, Permission]:
        (found,) = await self._tables.get(ACL_TABLE, [name.encode()])
        if found is None:
            return {}
        try:
            return parse_acl(found[1].decode())
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("ACL of %r in %s ignored: %s", name, ACL_TABLE, e)
            return {}
