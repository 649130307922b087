"""One function per registered op, generated from the op registry.

``kiln.ops.relu(x)``, ``kiln.ops.matmul(x, w, transpose_Y=True)``,
``kiln.ops.split(x, num=3, axis=1)``: positional arguments fill the op's
input slots in order, keyword arguments name slots (``X=``, ``Y=``) or
attributes (defaults from the registry). Each output slot gets fresh
variables; the function returns the single output, or a tuple in slot order
(a duplicable slot as a list). ``outputs={"ParamOut": p}`` names existing
variables instead (in-place updates); ``name=`` sets the prefix of the new
variables' names (made unique in the process: ``kiln.unique_name``). An op
that raises leaves the program and the name counter as they were.
``kiln ops`` and docs/ops.md describe every op.
"""

from . import _kiln
from .framework import Variable, atomic, default_main_program, fresh_name

_SCHEMAS = {s["type"]: s for s in _kiln.op_schemas()}


def _var_name(v, who):
    if isinstance(v, Variable):
        return v.name
    if isinstance(v, str):
        return v
    raise TypeError("%s: expected a kiln Variable, got %r" % (who, type(v).__name__))


def _args(v, who):
    if isinstance(v, (list, tuple)):
        return [_var_name(x, who) for x in v]
    return [_var_name(v, who)]


def _output_count(schema, slot, attrs, counts):
    """How many vars a duplicable output slot gets."""
    if slot in counts:
        return int(counts[slot])
    if schema["type"] == "split" and slot == "Out":
        sections = attrs.get("sections") or []
        return len(sections) if len(sections) else int(attrs.get("num", 0))
    raise _kiln.Error("op '%s': say how many outputs slot %s has (out_counts={'%s': n})"
                      % (schema["type"], slot, slot))


@atomic
def append_op(op_type, inputs=None, attrs=None, outputs=None, out_counts=None, name=None):
    """Appends one op to the default main program. `inputs`: slot ->
    Variable(s); `outputs`: slot -> existing Variable(s) (other output slots
    get fresh vars; `out_counts` gives how many for a duplicable slot).
    Returns {slot: [Variable, ...]}."""
    schema = _SCHEMAS.get(op_type)
    if schema is None:
        raise _kiln.Error("unknown op type '%s'" % op_type)
    program = default_main_program()
    attrs = dict(attrs or {})
    outputs = dict(outputs or {})
    counts = dict(out_counts or {})
    ins = {slot: _args(v, "op '%s' input %s" % (op_type, slot))
           for slot, v in (inputs or {}).items() if v is not None}
    outs = {}
    for slot, duplicable, _dispensable in schema["outputs"]:
        if slot in outputs:
            outs[slot] = _args(outputs[slot], "op '%s' output %s" % (op_type, slot))
        else:
            outs[slot] = _output_count(schema, slot, attrs, counts) if duplicable else 1
    unknown = set(outputs) - set(s for s, _, _ in schema["outputs"])
    if unknown:
        raise _kiln.Error("op '%s' has no output slot %s" % (op_type, sorted(unknown)[0]))
    names = program._p.append_op(op_type, ins, outs, attrs, fresh_name(program, name or op_type))
    return {slot: [Variable(program, n) for n in vs] for slot, vs in names.items()}


def _make(schema):
    op_type = schema["type"]
    slots = [s for s, _, _ in schema["inputs"]]
    attr_names = [a for a, _, _ in schema["attrs"]]
    out_slots = [(s, dup) for s, dup, _ in schema["outputs"]]

    def fn(*args, **kwargs):
        if len(args) > len(slots):
            raise TypeError("%s() takes at most %d inputs (%s), got %d"
                            % (op_type, len(slots), ", ".join(slots), len(args)))
        inputs = dict(zip(slots, args))
        attrs = {}
        name = kwargs.pop("name", None)
        outputs = kwargs.pop("outputs", None)
        counts = kwargs.pop("out_counts", None)
        for k, v in kwargs.items():
            if k in slots:
                inputs[k] = v
            elif k in attr_names or k == "op_role":
                attrs[k] = v
            else:
                raise TypeError("%s() has no input slot or attribute '%s' (slots: %s; attributes: %s)"
                                % (op_type, k, ", ".join(slots), ", ".join(attr_names) or "none"))
        made = append_op(op_type, inputs, attrs, outputs, counts, name)
        result = [made[s] if dup else made[s][0] for s, dup in out_slots if s in made]
        return result[0] if len(result) == 1 else tuple(result)

    fn.__name__ = op_type
    fn.__qualname__ = op_type
    inputs_doc = ", ".join(s + ("..." if d else "") + ("?" if o else "") for s, d, o in schema["inputs"])
    attrs_doc = ", ".join(a + ("" if has_default else " (required)") for a, _, has_default in schema["attrs"])
    fn.__doc__ = "%s\n\nInputs: %s\nAttributes: %s" % (schema["doc"], inputs_doc or "none", attrs_doc or "none")
    return fn


__all__ = ["append_op"]
for _schema in _SCHEMAS.values():
    globals()[_schema["type"]] = _make(_schema)
    __all__.append(_schema["type"])
