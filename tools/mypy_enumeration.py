"""A mypy plugin: a member of an equinox `Enumeration` (e.g. `RESULTS.successful`) has the
enumeration's type, as at run time.

equinox's metaclass turns each string of the class body (the member's message) into an
item of the class; mypy reads the class body and types `RESULTS.successful` as `str`.
This plugin gives such an access the class's own type, so `result=RESULTS.successful`
checks against `result: RESULTS`. Configured in pyproject.toml's `[tool.mypy]`.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.nodes import TypeInfo
from mypy.plugin import AttributeContext, Plugin
from mypy.types import Instance, Type, get_proper_type

_ENUMERATION = "equinox._enum.Enumeration"


class EnumerationPlugin(Plugin):
    def get_class_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        cls, _, name = fullname.rpartition(".")
        if name.startswith("_"):
            return None
        sym = self.lookup_fully_qualified(cls)
        if sym is None or not isinstance(sym.node, TypeInfo) or not sym.node.has_base(_ENUMERATION):
            return None
        info = sym.node

        def member_type(ctx: AttributeContext) -> Type:
            default = get_proper_type(ctx.default_attr_type)
            if isinstance(default, Instance) and default.type.fullname == "builtins.str" and not ctx.is_lvalue:
                return Instance(info, [])
            return ctx.default_attr_type

        return member_type


def plugin(version: str) -> type[Plugin]:
    return EnumerationPlugin
