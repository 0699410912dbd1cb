"""Compiles a message schema at one version into an encoder and a decoder.

Each (message, version, records mode) becomes two plain Python functions,
generated as source and ``exec``-ed once, so a request on the hot path runs
straight-line code: no schema walking, no per-field dict lookups of the
schema, adjacent fixed-size fields read and written by one precompiled
``struct.Struct``.

    decode(buf, pos, end, records_in) -> (body, pos)
        ``buf`` is a memoryview of format "B"; ``end`` is len(buf).
    encode(body, ap, records_out) -> None
        ``ap`` appends one bytes-like part of the output. Every struct's
        keys are checked against the schema's field names first: an
        unknown key raises, it is never dropped.

Decoders never trust a length: every string, bytes, records and tagged
field is checked against ``end`` before it is sliced, and an array count is
checked against the bytes left (count * smallest element size) before
anything is allocated. Running off the end otherwise surfaces as
``struct.error`` or ``IndexError``. ``CompiledMessage.error()`` turns any of
those into a ProtocolError naming the field and byte offset, read from the
generated function's frame (line number -> field path, loop counters ->
array indices), so the fast path pays nothing for good messages.

Records mode ("frames"): a ``records`` field is written as an int32 index
into ``records_out`` (which receives the value itself), and read back from
``records_in``, in flexible and non-flexible versions alike.

Strings are at most ``MAX_STRING_BYTES`` (Kafka's cap, in compact form too).
A request or embedded data string above it fails to encode: the caller
asked for something Kafka cannot carry. A response string above it is cut
to fit instead (``fit_response_string``): only the server writes one, and
what makes it long is client input quoted in a message (a config value in
an ``error_message``), so refusing it would turn a refused request into an
answer that is never sent (the connection dropped, or the error code lost).
"""
from __future__ import annotations

import linecache
import math
import struct
import uuid

from kafkalite.protocol.errors import MalformedInput, ProtocolError
from kafkalite.protocol.schema import Field, Message
from kafkalite.protocol.types import (
    SMALL_UVARINTS,
    ZERO_UUID,
    read_uuid,
    read_uvarint,
    skip_tagged_fields,
    uuid_bytes,
    write_uvarint,
)

# Exceptions a generated decoder may raise on bad input (never on good).
DECODE_ERRORS = (MalformedInput, struct.error, IndexError, ValueError, OverflowError)
# ... and an encoder on a body that does not fit the schema.
ENCODE_ERRORS = (MalformedInput, struct.error, TypeError, ValueError, AttributeError, OverflowError)


def _byte_length(value) -> int:
    try:
        return memoryview(value).nbytes
    except TypeError:
        # A records value that is not in memory: a file region (``length``,
        # ``sendfile``) that ``encode_response_parts`` leaves to the transport.
        if hasattr(value, "sendfile"):
            return value.length
        raise


# Kafka's cap on a STRING's UTF-8 bytes (its int16 length), compact strings included.
MAX_STRING_BYTES = 32767
# What ends a response string cut to fit, before the size it had.
_CUT_MARKER = "\u2026 (cut from {} bytes)"


def fit_response_string(encoded: bytes) -> bytes:
    """``encoded`` (valid UTF-8) cut to at most MAX_STRING_BYTES on a
    character boundary, ending with an ellipsis and the size it had."""
    marker = _CUT_MARKER.format(len(encoded)).encode()
    end = MAX_STRING_BYTES - len(marker)
    while end > 0 and encoded[end] & 0xC0 == 0x80:     # inside a character: back to its start
        end -= 1
    return encoded[:end] + marker


def _too_long(size: int) -> MalformedInput:
    return MalformedInput(f"string of {size} bytes, at most {MAX_STRING_BYTES} allowed")


def _past_end(what: str, size: int, end: int) -> MalformedInput:
    return MalformedInput(f"{what} of {size} bytes runs past the end of the input ({end} bytes)")


def _bad_length(what: str, size: int) -> MalformedInput:
    return MalformedInput(f"invalid {what} length {size}")


def _too_many(count: int, pos: int, end: int) -> MalformedInput:
    return MalformedInput(f"array count {count} cannot fit in the {end - pos} bytes left")


def _unknown_keys(struct: dict, known: frozenset) -> MalformedInput:
    unknown = sorted(str(k) for k in struct if k not in known)
    return MalformedInput(f"unknown field(s) {', '.join(map(repr, unknown))}; the schema has "
                          f"{', '.join(sorted(known)) or 'no fields'}")


# Names every generated function sees as globals.
_BASE_NAMESPACE = {
    "_uvarint": read_uvarint,
    "_write_uvarint": write_uvarint,
    "_SMALL": SMALL_UVARINTS,
    "_skip_tags": skip_tagged_fields,
    "_read_uuid": read_uuid,
    "_uuid_bytes": uuid_bytes,
    "_byte_length": _byte_length,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_Malformed": MalformedInput,
    "_past_end": _past_end,
    "_too_long": _too_long,
    "_fit": fit_response_string,
    "_bad_length": _bad_length,
    "_too_many": _too_many,
    "_unknown_keys": _unknown_keys,
    "_ZERO_UUID": ZERO_UUID,
    "_i16": struct.Struct(">h").unpack_from,
    "_i32": struct.Struct(">i").unpack_from,
    "_p16": struct.Struct(">h").pack,
    "_p32": struct.Struct(">i").pack,
}

# filename of generated code -> {line number: field path, as (name, loop counter) pairs}
_GENERATED: dict[str, dict[int, tuple]] = {}


class CompiledMessage:
    """The encoder and decoder of one message at one version."""

    __slots__ = ("message", "version", "flexible", "frames", "label", "header_version",
                 "encode", "decode", "encode_source", "decode_source")

    def __init__(self, message: Message, version: int, frames: bool):
        self.message = message
        self.version = version
        self.flexible = message.is_flexible(version)
        self.frames = frames
        self.label = f"{message.name} v{version}"
        self.header_version: int | None = None  # set by the codec for requests and responses
        suffix = " (records in frames)" if frames else ""
        self.decode, self.decode_source = _DecoderWriter(message, version, frames).build(
            f"<kafkalite.protocol: decode {self.label}{suffix}>")
        self.encode, self.encode_source = _EncoderWriter(message, version, frames).build(
            f"<kafkalite.protocol: encode {self.label}{suffix}>")

    def error(self, exc: BaseException, *, encoding: bool, buf_len: int = 0, header=None) -> ProtocolError:
        """A ProtocolError saying what went wrong and where, from ``exc``."""
        where, pos = _locate(exc)
        if encoding:
            return ProtocolError(f"{self.label}: cannot encode {where or 'body'}: {_describe(exc)}")
        at = f" at byte {pos}" if pos is not None else ""
        if isinstance(exc, MalformedInput):
            what = str(exc)
        elif isinstance(exc, (struct.error, IndexError)):
            what = f"truncated, the input ends at byte {buf_len}"
        elif isinstance(exc, UnicodeDecodeError):
            what = f"invalid UTF-8 ({exc.reason})"
        else:
            what = _describe(exc)
        return ProtocolError(f"{self.label}: {where or 'body'}{at}: {what}", header=header)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _locate(exc: BaseException) -> tuple[str | None, int | None]:
    """(field path, byte offset) of the innermost generated frame in ``exc``."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        entry = _GENERATED.get(tb.tb_frame.f_code.co_filename)
        if entry is not None:
            found = (tb.tb_frame, tb.tb_lineno, entry)
        tb = tb.tb_next
    if found is None:
        return None, None
    frame, lineno, paths = found
    local = frame.f_locals
    parts = []
    for name, index_var in paths.get(lineno, ()):
        index = local.get(index_var) if index_var else None
        parts.append(f"{name}[{index}]" if index is not None else name)
    pos = local.get("pos")
    return ".".join(parts) or None, pos if isinstance(pos, int) else None


class _Writer:
    """Collects generated lines, the field path of each, and constants."""

    def __init__(self, message: Message, version: int, frames: bool):
        self.message = message
        self.version = version
        self.flexible = message.is_flexible(version)
        self.frames = frames
        self.lines: list[str] = []
        self.paths: dict[int, tuple] = {}
        self.path: list[tuple[str, str | None]] = []
        self.namespace = dict(_BASE_NAMESPACE)
        self.counter = 0

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)
        self.paths[len(self.lines)] = tuple(self.path)

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value, prefix: str = "_c") -> str:
        """An expression for ``value``: a literal where possible, else a global."""
        if value is None or isinstance(value, (bool, int, str, bytes)) or (
                isinstance(value, float) and math.isfinite(value)):
            return repr(value)
        if isinstance(value, uuid.UUID) and value == ZERO_UUID:
            return "_ZERO_UUID"
        name = self.var(prefix)
        self.namespace[name] = value
        return name

    def struct_const(self, fmt: str, method: str) -> str:
        name = f"_{method}_{fmt.replace('?', 'B_').replace('>', '')}"
        if name not in self.namespace:
            self.namespace[name] = getattr(struct.Struct(fmt), method)
        return name

    def default_expr(self, field: Field, version: int) -> str:
        """Source for a fresh default value of ``field`` at ``version``."""
        value = field.default(version)
        if isinstance(value, list):
            return "[]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{f.name!r}: {self.default_expr(f, version)}" for f in field.fields) + "}"
        return self.const(value)

    def present(self, fields) -> list[Field]:
        return [f for f in fields if f.present(self.version)]

    def build(self, filename: str):
        source = "\n".join(self.lines) + "\n"
        code = compile(source, filename, "exec")
        exec(code, self.namespace)
        _GENERATED[filename] = self.paths
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        return self.namespace[self.function_name], source


def _fixed_runs(fields: list[Field]):
    """Split fields into runs: lists of adjacent fixed-size numbers, or single fields."""
    run: list[Field] = []
    for field in fields:
        if field.kind == "primitive" and field.wire.code is not None:
            run.append(field)
            continue
        if run:
            yield run
            run = []
        yield [field]
    if run:
        yield run


def _run_name(run: list[Field]) -> str:
    return "(" + ", ".join(f.name for f in run) + ")" if len(run) > 1 else run[0].name


def _is_fixed_run(run: list[Field]) -> bool:
    return run[0].kind == "primitive" and run[0].wire.code is not None


class _DecoderWriter(_Writer):
    function_name = "decode"

    def build(self, filename: str):
        self.emit(0, "def decode(buf, pos, end, records_in):")
        body = self.struct(self.message.fields, 1)
        self.emit(1, f"return {body}, pos")
        return super().build(filename)

    def min_size(self, field: Field) -> int:
        """Fewest bytes one value of ``field`` (or one array element) takes."""
        compact = self.flexible
        if field.kind == "struct" and field.is_nullable(self.version):
            return 1                                  # the null marker
        if field.kind in ("primitive", "array"):
            return field.wire.min_size(compact) if field.wire.name != "records" or not self.frames else 4
        fields = [f for f in self.present(field.fields) if f.tag is None]
        return sum(self.min_size(f) if f.kind in ("primitive", "struct") else (1 if compact else 4)
                   for f in fields) + (1 if compact else 0)

    def struct(self, fields, depth: int) -> str:
        """Emit code decoding a struct's fields; returns the dict expression."""
        values: dict[str, str] = {}
        present = self.present(fields)
        untagged = [f for f in present if f.tag is None]
        tagged = sorted((f for f in present if f.tag is not None), key=lambda f: f.tag)
        for run in _fixed_runs(untagged):
            if _is_fixed_run(run):
                names = [self.var("v") for _ in run]
                fmt = ">" + "".join(f.wire.code for f in run)
                size = struct.calcsize(fmt)
                self.path.append((_run_name(run), None))
                self.emit(depth, f"{', '.join(names)}, = {self.struct_const(fmt, 'unpack_from')}(buf, pos)")
                self.emit(depth, f"pos += {size}")
                self.path.pop()
                for f, name in zip(run, names):
                    values[f.name] = name
            else:
                field = run[0]
                target = self.var("v")
                self.path.append((field.name, None))
                self.value(field, target, depth)
                self.path.pop()
                values[field.name] = target
        if self.flexible:
            self.tagged_section(tagged, values, depth)
        items = []
        for f in fields:
            expr = values.get(f.name) or self.default_expr(f, self.version)
            items.append(f"{f.name!r}: {expr}")
        return "{" + ", ".join(items) + "}"

    def tagged_section(self, tagged: list[Field], values: dict[str, str], depth: int) -> None:
        if not tagged:
            self.emit(depth, "if buf[pos] == 0:")
            self.emit(depth + 1, "pos += 1")
            self.emit(depth, "else:")
            self.path.append(("tagged fields", None))
            self.emit(depth + 1, "pos = _skip_tags(buf, pos, end)")
            self.path.pop()
            return
        for f in tagged:
            target = self.var("t")
            self.emit(depth, f"{target} = {self.default_expr(f, self.version)}")
            values[f.name] = target
        section_end = self.var("te")
        size = self.var("size")
        self.path.append(("tagged fields", None))
        self.emit(depth, "if buf[pos] == 0:")
        self.emit(depth + 1, "pos += 1")
        self.emit(depth, "else:")
        d = depth + 1
        self.emit(d, "n, pos = _uvarint(buf, pos)")
        self.emit(d, "if n > (end - pos) // 2:")
        self.emit(d + 1, "raise _Malformed(f'{n} tagged fields cannot fit in {end - pos} bytes')")
        self.emit(d, "for _ in range(n):")
        self.emit(d + 1, "tag, pos = _uvarint(buf, pos)")
        self.emit(d + 1, f"{size}, pos = _uvarint(buf, pos)")
        self.emit(d + 1, f"{section_end} = pos + {size}")
        self.emit(d + 1, f"if {section_end} > end:")
        self.emit(d + 2, f"raise _past_end(f'tagged field {{tag}}', {size}, end)")
        self.path.pop()
        keyword = "if"
        for f in tagged:
            self.emit(d + 1, f"{keyword} tag == {f.tag}:")
            keyword = "elif"
            self.path.append((f.name, None))
            self.value(f, values[f.name], d + 2)
            self.emit(d + 2, f"if pos != {section_end}:")
            self.emit(d + 3, f"raise _Malformed(f'tagged field {f.tag} ({f.name}) is {{{size}}} bytes, "
                             f"its value {{pos - {section_end} + {size}}}')")
            self.path.pop()
        self.emit(d + 1, "else:")
        self.emit(d + 2, f"pos = {section_end}")

    def length(self, depth: int, what: str, nullable: bool, four_bytes: bool) -> None:
        """Emit reading a length/count into ``n``; -1 means null afterwards."""
        if self.flexible:
            # One and two bytes inline: a records value (a batch of 128 B
            # to 16 KiB) has a two-byte length, one in every partition of a
            # Produce request, and a call per partition showed in a broker's
            # profile with librdkafka's many small requests (issue 46).
            self.emit(depth, "n = buf[pos]")
            self.emit(depth, "if n < 128:")
            self.emit(depth + 1, "pos += 1")
            self.emit(depth, "elif buf[pos + 1] < 128:")
            self.emit(depth + 1, "n = (n & 127) | (buf[pos + 1] << 7)")
            self.emit(depth + 1, "pos += 2")
            self.emit(depth, "else:")
            self.emit(depth + 1, "n, pos = _uvarint(buf, pos)")
            self.emit(depth, "n -= 1")
        else:
            reader = "_i32" if four_bytes else "_i16"
            self.emit(depth, f"n, = {reader}(buf, pos)")
            self.emit(depth, f"pos += {4 if four_bytes else 2}")
        low = "-1" if nullable else "0"
        if self.flexible and what == "string":
            self.emit(depth, f"if n < {low} or n > {MAX_STRING_BYTES}:")
        else:
            self.emit(depth, f"if n < {low}:")
        self.emit(depth + 1, f"raise _bad_length({what!r}, n)")

    def value(self, field: Field, target: str, depth: int) -> None:
        """Emit code decoding one value of ``field`` into ``target``."""
        nullable = field.is_nullable(self.version)
        if field.kind == "struct" and nullable:
            marker = self.var("m")
            self.emit(depth, f"{marker}, = {self.struct_const('>b', 'unpack_from')}(buf, pos)")
            self.emit(depth, "pos += 1")
            self.emit(depth, f"if {marker} < 0:")
            self.emit(depth + 1, f"{target} = None")
            self.emit(depth, "else:")
            expr = self.struct(field.fields, depth + 1)
            self.emit(depth + 1, f"{target} = {expr}")
        elif field.kind == "struct":
            expr = self.struct(field.fields, depth)
            self.emit(depth, f"{target} = {expr}")
        elif field.kind in ("array", "struct_array"):
            self.array(field, target, depth, nullable)
        else:
            self.primitive(field.wire, target, depth, nullable)

    def primitive(self, wire, target: str, depth: int, nullable: bool) -> None:
        name = wire.name
        if wire.code is not None:
            reader = self.struct_const(">" + wire.code, "unpack_from")
            self.emit(depth, f"{target}, = {reader}(buf, pos)")
            self.emit(depth, f"pos += {wire.size}")
            return
        if name == "uuid":
            self.emit(depth, f"{target} = _read_uuid(buf, pos)")
            self.emit(depth, "pos += 16")
            return
        if name == "records" and self.frames:
            self.emit(depth, "n, = _i32(buf, pos)")
            self.emit(depth, "pos += 4")
            self.emit(depth, "if n == -1:")
            self.emit(depth + 1, f"{target} = None")
            self.emit(depth, "elif 0 <= n < len(records_in):")
            self.emit(depth + 1, f"{target} = records_in[n]")
            self.emit(depth, "else:")
            self.emit(depth + 1, "raise _Malformed(f'records frame index {n} but {len(records_in)} frames')")
            return
        nullable = nullable or name == "records"
        self.length(depth, name, nullable, four_bytes=name != "string")
        d = depth
        if nullable:
            self.emit(depth, "if n == -1:")
            self.emit(depth + 1, f"{target} = None")
            self.emit(depth, "else:")
            d = depth + 1
        self.emit(d, "e = pos + n")
        self.emit(d, "if e > end:")
        self.emit(d + 1, f"raise _past_end({name!r}, n, end)")
        if name == "string":
            self.emit(d, f"{target} = str(buf[pos:e], 'utf-8')")
        elif name == "bytes":
            self.emit(d, f"{target} = bytes(buf[pos:e])")
        else:
            self.emit(d, f"{target} = buf[pos:e]")
        self.emit(d, "pos = e")

    def array(self, field: Field, target: str, depth: int, nullable: bool) -> None:
        self.length(depth, "array", nullable, four_bytes=True)
        d = depth
        if nullable:
            self.emit(depth, "if n == -1:")
            self.emit(depth + 1, f"{target} = None")
            self.emit(depth, "else:")
            d = depth + 1
        element_size = max(1, self.min_size(field))
        self.emit(d, f"if n * {element_size} > end - pos:")
        self.emit(d + 1, "raise _too_many(n, pos, end)")
        wire = field.wire
        if field.kind == "array" and wire.code is not None:
            self.emit(d, f"{target} = list(_unpack_from(f'>{{n}}{wire.code}', buf, pos))")
            self.emit(d, f"pos += n * {wire.size}")
            return
        index = self.var("i")
        name, _ = self.path.pop()
        self.path.append((name, index))
        self.emit(d, f"{target} = []")
        self.emit(d, f"for {index} in range(n):")
        element = self.var("x")
        if field.kind == "struct_array":
            expr = self.struct(field.fields, d + 1)
            self.emit(d + 1, f"{target}.append({expr})")
        else:
            self.primitive(wire, element, d + 1, nullable=False)
            self.emit(d + 1, f"{target}.append({element})")
        self.path.pop()
        self.path.append((name, None))


class _EncoderWriter(_Writer):
    function_name = "encode"

    def build(self, filename: str):
        self.emit(0, "def encode(s, ap, records_out):")
        self.ap = "ap"
        self.struct(self.message.fields, "s", 1)
        self.emit(1, "return None")
        return super().build(filename)

    def uvarint_expr(self, expr: str) -> str:
        return f"(_SMALL[{expr}] if {expr} < 128 else _write_uvarint({expr}))"

    def struct(self, fields, source: str, depth: int) -> None:
        # A key the schema does not know (in any version) is a caller's typo:
        # dropping it silently would send a wrong answer, so it is an error.
        # Keys of fields this version lacks are fine (bodies are written
        # once for every version).
        known = self.const(frozenset(f.name for f in fields), "_known")
        self.emit(depth, f"if not {known}.issuperset({source}):")
        self.emit(depth + 1, f"raise _unknown_keys({source}, {known})")
        present = self.present(fields)
        untagged = [f for f in present if f.tag is None]
        tagged = sorted((f for f in present if f.tag is not None), key=lambda f: f.tag)
        for run in _fixed_runs(untagged):
            if _is_fixed_run(run):
                fmt = ">" + "".join(f.wire.code for f in run)
                args = ", ".join(self.get_expr(source, f) for f in run)
                self.path.append((_run_name(run), None))
                self.emit(depth, f"{self.ap}({self.struct_const(fmt, 'pack')}({args}))")
                self.path.pop()
            else:
                field = run[0]
                value = self.var("v")
                self.path.append((field.name, None))
                self.fetch(field, source, value, depth)
                self.value(field, value, depth)
                self.path.pop()
        if self.flexible:
            self.tagged_section(tagged, source, depth)

    def get_expr(self, source: str, field: Field) -> str:
        return f"{source}.get({field.name!r}, {self.default_expr(field, self.version)})"

    def fetch(self, field: Field, source: str, value: str, depth: int) -> None:
        if field.kind == "struct" and field.is_nullable(self.version):
            self.emit(depth, f"{value} = {source}.get({field.name!r})")
        elif field.kind == "struct":
            self.emit(depth, f"{value} = {source}.get({field.name!r}) or {{}}")
        else:
            self.emit(depth, f"{value} = {self.get_expr(source, field)}")

    def tagged_section(self, tagged: list[Field], source: str, depth: int) -> None:
        if not tagged:
            self.emit(depth, f"{self.ap}(b'\\x00')")
            return
        tags = self.var("tags")
        self.emit(depth, f"{tags} = []")
        outer_ap = self.ap
        for f in tagged:
            value = self.var("v")
            self.path.append((f.name, None))
            if f.kind == "struct":
                # Missing or {} is the default; otherwise compare on the wire.
                self.emit(depth, f"{value} = {source}.get({f.name!r})")
                self.emit(depth, f"if {value}:")
            else:
                default = self.default_expr(f, self.version)
                self.emit(depth, f"{value} = {source}.get({f.name!r}, {default})")
                self.emit(depth, f"if {value} != {default}:")
            parts = self.var("parts")
            self.ap = self.var("ap")
            self.emit(depth + 1, f"{parts} = []")
            self.emit(depth + 1, f"{self.ap} = {parts}.append")
            self.value(f, value, depth + 1)
            self.ap = outer_ap
            data = self.var("data")
            self.emit(depth + 1, f"{data} = b''.join({parts})")
            if f.kind == "struct":
                default_bytes = self.const(self.default_encoding(f), "_default")
                self.emit(depth + 1, f"if {data} != {default_bytes}:")
                self.emit(depth + 2, f"{tags}.append(({f.tag}, {data}))")
            else:
                self.emit(depth + 1, f"{tags}.append(({f.tag}, {data}))")
            self.path.pop()
        self.emit(depth, f"if {tags}:")
        self.emit(depth + 1, f"{self.ap}({self.uvarint_expr(f'len({tags})')})")
        self.emit(depth + 1, f"for tag, data in {tags}:")
        self.emit(depth + 2, f"{self.ap}({self.uvarint_expr('tag')})")
        self.emit(depth + 2, f"{self.ap}({self.uvarint_expr('len(data)')})")
        self.emit(depth + 2, f"{self.ap}(data)")
        self.emit(depth, "else:")
        self.emit(depth + 1, f"{self.ap}(b'\\x00')")

    def default_encoding(self, field: Field) -> bytes:
        """The wire bytes of a struct field's default value at this version."""
        sub = _EncoderWriter(Message("default", None, "data", str(self.version), str(self.message.flexible),
                                     list(field.fields)), self.version, False)
        parts: list = []
        fn, _ = sub.build(f"<kafkalite.protocol: default {self.message.name}.{field.name} v{self.version}>")
        fn({}, parts.append, None)
        return b"".join(parts)

    def length(self, depth: int, expr: str, four_bytes: bool) -> None:
        if self.flexible:
            self.emit(depth, f"n = {expr} + 1")
            self.emit(depth, f"{self.ap}({self.uvarint_expr('n')})")
        else:
            self.emit(depth, f"{self.ap}({'_p32' if four_bytes else '_p16'}({expr}))")

    def null(self, four_bytes: bool) -> str:
        if self.flexible:
            return "b'\\x00'"
        return "b'\\xff\\xff\\xff\\xff'" if four_bytes else "b'\\xff\\xff'"

    def value(self, field: Field, value: str, depth: int) -> None:
        nullable = field.is_nullable(self.version)
        if field.kind == "struct" and nullable:
            self.emit(depth, f"if {value} is None:")
            self.emit(depth + 1, f"{self.ap}(b'\\xff')")
            self.emit(depth, "else:")
            self.emit(depth + 1, f"{self.ap}(b'\\x01')")
            self.struct(field.fields, value, depth + 1)
        elif field.kind == "struct":
            self.struct(field.fields, value, depth)
        elif field.kind in ("array", "struct_array"):
            self.array(field, value, depth, nullable)
        else:
            self.primitive(field.wire, value, depth, nullable)

    def primitive(self, wire, value: str, depth: int, nullable: bool) -> None:
        name = wire.name
        ap = self.ap
        if wire.code is not None:
            self.emit(depth, f"{ap}({self.struct_const('>' + wire.code, 'pack')}({value}))")
            return
        if name == "uuid":
            self.emit(depth, f"{ap}(_uuid_bytes({value}))")
            return
        if name == "records" and self.frames:
            self.emit(depth, f"if {value} is None:")
            self.emit(depth + 1, f"{ap}(b'\\xff\\xff\\xff\\xff')")
            self.emit(depth, "else:")
            self.emit(depth + 1, f"{ap}(_p32(len(records_out)))")
            self.emit(depth + 1, f"records_out.append({value})")
            return
        nullable = nullable or name == "records"
        four_bytes = name != "string"
        d = depth
        if nullable:
            self.emit(depth, f"if {value} is None:")
            self.emit(depth + 1, f"{ap}({self.null(four_bytes)})")
            self.emit(depth, "else:")
            d = depth + 1
        if name == "string":
            self.emit(d, f"{value} = {value}.encode()")
            self.emit(d, f"if len({value}) > {MAX_STRING_BYTES}:")
            if self.message.kind == "response":
                self.emit(d + 1, f"{value} = _fit({value})")
            else:
                self.emit(d + 1, f"raise _too_long(len({value}))")
            self.length(d, f"len({value})", four_bytes)
        else:
            self.emit(d, f"size = len({value}) if type({value}) is bytes else _byte_length({value})")
            self.length(d, "size", four_bytes)
        self.emit(d, f"{ap}({value})")

    def array(self, field: Field, value: str, depth: int, nullable: bool) -> None:
        ap = self.ap
        d = depth
        if nullable:
            self.emit(depth, f"if {value} is None:")
            self.emit(depth + 1, f"{ap}({self.null(True)})")
            self.emit(depth, "else:")
            d = depth + 1
        self.length(d, f"len({value})", True)
        wire = field.wire
        if field.kind == "array" and wire.code is not None:
            self.emit(d, f"{ap}(_pack(f'>{{len({value})}}{wire.code}', *{value}))")
            return
        element = self.var("x")
        self.emit(d, f"for {element} in {value}:")
        name, _ = self.path.pop()
        self.path.append((name + "[]", None))
        if field.kind == "struct_array":
            self.struct(field.fields, element, d + 1)
        else:
            self.primitive(wire, element, d + 1, nullable=False)
        self.path.pop()
        self.path.append((name, None))
