"""The package's layering rules that import-linter cannot see: no module imports a private
name (one starting with `_`) from another subpackage, and the scaling mode is branched on
only inside `_formats/` (and where it is defined: the enum and the quantizers)."""

import ast
import pathlib

import eqx_quant

PACKAGE = pathlib.Path(eqx_quant.__file__).resolve().parent
MODE_OWNERS = {"_formats", "_core", "_quantizer"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        yield path, parts


def _subpackage(parts) -> str:
    return parts[0] if len(parts) > 1 else ""


def _absolute(parts, node: ast.ImportFrom) -> tuple[str, ...]:
    """The imported module's path inside eqx_quant (empty for eqx_quant itself)."""
    if node.level == 0:
        names = (node.module or "").split(".")
        return tuple(names[1:]) if names[0] == "eqx_quant" else ("<external>",)
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    base = package[: len(package) - (node.level - 1)]
    return base + tuple((node.module or "").split(".")) if node.module else base


def test_no_private_name_is_imported_from_another_subpackage():
    offences = []
    for path, parts in _modules():
        here = _subpackage(parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _absolute(parts, node)
            if not target or target[0] in ("<external>", here):
                continue
            private = [a.name for a in node.names if a.name.startswith("_")]
            private += [t for t in target[1:] if t.startswith("_")]
            if private:
                offences.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {private}")
    assert not offences, "private names imported across subpackages:\n" + "\n".join(offences)


def test_only_the_formats_branch_on_the_scaling_mode():
    offences = []
    for path, parts in _modules():
        if _subpackage(parts) in MODE_OWNERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            is_member = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ScalingMode"
            )
            is_name_test = (
                isinstance(node, ast.Attribute)
                and node.attr in ("is_tensor_scaling",)
            ) or (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "startswith"
                and "mode" in ast.unparse(node.func.value)
            )
            if is_member or is_name_test:
                offences.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert not offences, "scaling-mode branches outside _formats/:\n" + "\n".join(offences)
