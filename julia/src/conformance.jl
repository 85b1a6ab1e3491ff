# The rules of docs/bundle-format.md a manifest must follow (format 3, or format 2 for the
# bundle JuliaBridge writes when BLAKE3 failed its self-test), checked on every
# manifest JuliaBridge builds before it is written, so that it never writes a bundle the Python
# reader (juliabridge.bundle.manifest.parse_manifest, the reference) refuses. Most rules cannot
# fail for what tracing produces; the ones a user's trees can break (a NamedTuple key with a
# '/', a huge string in the state, a state array shared by two paths) get an ExportError that
# names the field and the rule. The limits are the spec's (§1, §3.3, §3.8, §3.11) and the
# Python reader's constants (juliabridge/bundle/manifest/__init__.py).

const MAX_PATH_STEP = 2^31
const MAX_PATH_DEPTH = 64
const MAX_RANK = 64
const MAX_DIM = 2^40
const MAX_TENSOR_BYTES = 2^38            # 256 GiB
const MAX_STATIC_STRING = 4096
const MAX_JULIA_TYPE = 256
const MAX_FILE_NAME = 255
const MAX_JSON_DEPTH = 64
const MAX_MANIFEST_BYTES = 64 * 2^20
const JULIA_TOOL = "JuliaBridge.jl"
# Anchored with `\z`, not `$`: PCRE's `$` also matches before a final newline, which Python's
# `\Z` (the reader) does not.
const VERSION_RE = r"^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})\z"
const HEX64_RE = r"^[0-9a-f]{64}\z"
const DATASET_RE = r"^/[^\x00]{1,4096}\z"
const ELEMENT_BYTES = Dict(
    "f16" => 2, "bf16" => 2, "f32" => 4, "f64" => 8, "i1" => 1, "i8" => 1, "i16" => 2, "i32" => 4,
    "i64" => 8, "ui8" => 1, "ui16" => 2, "ui32" => 4, "ui64" => 8, "complex<f32>" => 8, "complex<f64>" => 16,
)

struct ManifestRuleError <: Exception
    at::String
    msg::String
end

rule_fail(at, msg) = throw(ManifestRuleError(at, msg))

is_int(v) = v isa Integer && !(v isa Bool)

"""Why `name` is not a plain file name inside a bundle (spec §1), or `nothing`."""
function unsafe_file_name(name)::Union{Nothing,String}
    name isa AbstractString || return "is not a string"
    isvalid(name) || return "is not valid Unicode"
    (isempty(name) || name == "." || name == "..") && return "is empty, '.' or '..'"
    startswith(name, '~') && return "starts with '~'"
    any(c -> c in ('/', '\\', '\0'), name) && return "contains '/', '\\' or NUL"
    all(isprint, name) || return "contains non-printable characters"
    length(name) > MAX_FILE_NAME && return "is longer than $MAX_FILE_NAME characters"
    return nothing
end

"""Why `path` is not a path of spec §3.8, or `nothing`."""
function path_problem(path; nonempty::Bool=false)::Union{Nothing,String}
    path isa AbstractVector || return "is not an array"
    (nonempty && isempty(path)) && return "is empty, but it names a leaf inside the tree"
    length(path) > MAX_PATH_DEPTH && return "has $(length(path)) steps, more than $MAX_PATH_DEPTH"
    for s in path
        if is_int(s)
            1 <= s <= MAX_PATH_STEP || return "has the integer step $s outside [1, 2^31]"
        elseif s isa AbstractString
            isvalid(s) || return "has the step $(repr(s)), which is not valid Unicode"
            (isempty(s) || s == "." || s == ".." || occursin('/', s) || occursin('\0', s)) &&
                return "has the step $(repr(s)), which cannot be an HDF5 name (empty, '.', '..', or containing '/' or NUL)"
        else
            return "has the step $(repr(s)), neither a name nor a position"
        end
    end
    return nothing
end

function check_path(path, at; nonempty::Bool=false)::Vector{Any}
    why = path_problem(path; nonempty)
    why === nothing || rule_fail(at, "the path $(repr(path)) $why")
    return Vector{Any}(path)
end

"""Why `v` cannot be a `static_state` value (spec §3.11: a JSON scalar), or `nothing`."""
function static_value_problem(v)::Union{Nothing,String}
    (v === nothing || v isa Bool) && return nothing
    if is_int(v)
        -(Int128(2)^63) <= v < Int128(2)^64 || return "the integer $v fits neither Int64 nor UInt64"
        return nothing
    elseif v isa AbstractFloat
        isfinite(v) || return "$v is not a JSON number"
        return nothing
    elseif v isa AbstractString
        isvalid(v) || return "the string is not valid Unicode"
        length(v) > MAX_STATIC_STRING && return "the string has $(length(v)) characters, more than $MAX_STATIC_STRING"
        return nothing
    end
    return "a $(typeof(v)) is not a JSON scalar (null, boolean, number or string)"
end

"""Why `t` cannot be a `julia_type` (spec §3.11: 1 to 256 printable characters), or `nothing`."""
function julia_type_problem(t)::Union{Nothing,String}
    t isa AbstractString || return "is not a string"
    (isvalid(t) && 1 <= length(t) <= MAX_JULIA_TYPE && all(isprint, t)) ||
        return "$(repr(first(t, 80))) is not 1 to $MAX_JULIA_TYPE printable characters"
    return nothing
end

function get_typed(obj, key, ::Type{T}, at) where {T}
    (obj isa AbstractDict && haskey(obj, key)) || rule_fail(at, "missing required key $(repr(key))")
    v = obj[key]
    (v isa T && !(v isa Bool && T !== Bool)) || rule_fail("$at.$key", "expected $T, found $(repr(v))")
    return v
end

function check_hex(obj, key, at)
    occursin(HEX64_RE, get_typed(obj, key, AbstractString, at)) || rule_fail("$at.$key", "expected 64 lowercase hex digits")
    return nothing
end

"""
A dataset entry's digest (spec §4.1): 64 lowercase hex digits under `scheme.key` (`blake3` in
format 3, `sha256` in format 2). The other format's key is not part of this format; readers
ignore it, and JuliaBridge never writes it.
"""
function check_digest(obj, scheme::DigestScheme, at)
    check_hex(obj, scheme.key, at)
    other = scheme.key == DIGEST_KEY ? FALLBACK_DIGEST_KEY : DIGEST_KEY
    haskey(obj, other) &&
        rule_fail("$at.$other", "format $(scheme.format_version) records a dataset's digest as $(scheme.key) only; JuliaBridge does not write $other there")
    return nothing
end

function check_shape(shape, dtype, at)
    (shape isa AbstractVector && all(d -> is_int(d) && 0 <= d <= MAX_DIM, shape)) ||
        rule_fail(at, "expected dimensions in [0, 2^40], found $(repr(shape))")
    length(shape) > MAX_RANK && rule_fail(at, "rank $(length(shape)) exceeds $MAX_RANK")
    haskey(ELEMENT_BYTES, dtype) || rule_fail(at, "unknown element type $(repr(dtype))")
    bytes = Int128(ELEMENT_BYTES[dtype])
    for d in shape
        bytes = min(bytes * d, Int128(MAX_TENSOR_BYTES) + 1)   # saturating: 64 dims of 2^40 overflow Int128
    end
    bytes > MAX_TENSOR_BYTES && rule_fail(at, "an array of $bytes bytes is more than the 256 GiB a reader accepts")
    return Vector{Int}(shape)
end

function check_batch_axis(obj, shape, at)
    ax = get(obj, "batch_axis", nothing)
    ax === nothing && return nothing
    (is_int(ax) && 0 <= ax < length(shape)) || rule_fail("$at.batch_axis", "axis $(repr(ax)) out of range for rank $(length(shape))")
    return Int(ax)
end

"""Within one tree no path is a proper prefix of another, and below one parent the steps are all integers or all names."""
function check_tree(leaves::AbstractVector, what::String; containers::AbstractVector=Vector{Any}[])
    set = Set(leaves)
    for p in leaves, n in 0:(length(p) - 1)
        p[1:n] in set && rule_fail(what, "path $(repr(p[1:n])) is a leaf but $(repr(p)) continues below it")
    end
    for c in containers
        isempty(c) && rule_fail(what, "the root cannot be listed as an empty container")
        any(n -> c[1:n] in set, 1:length(c)) && rule_fail(what, "$(repr(c)) is listed as an empty container but is or is below a leaf")
        any(p -> length(p) > length(c) && p[1:length(c)] == c, leaves) &&
            rule_fail(what, "$(repr(c)) is listed as an empty container but holds a leaf")
    end
    kinds = Dict{Vector{Any},Bool}()
    for p in vcat(leaves, containers), n in 1:length(p)
        kind = is_int(p[n])
        get!(kinds, p[1:(n - 1)], kind) == kind ||
            rule_fail(what, "below $(repr(p[1:(n - 1)])) some steps are integers and some names; a Julia container is a Tuple/Array or a NamedTuple/struct/Dict, never both")
    end
    return nothing
end

"""
Nesting depth of JSON text (each `{` or `[` outside a string opens a level), measured the way
the Python reader measures it before parsing.
"""
function json_text_depth(text::AbstractString)::Int
    depth = deepest = 0
    in_string = escaped = false
    for c in codeunits(text)
        if in_string
            if escaped
                escaped = false
            elseif c == UInt8('\\')
                escaped = true
            elseif c == UInt8('"')
                in_string = false
            end
        elseif c == UInt8('"')
            in_string = true
        elseif c == UInt8('{') || c == UInt8('[')
            depth += 1
            deepest = max(deepest, depth)
        elseif c == UInt8('}') || c == UInt8(']')
            depth -= 1
        end
    end
    return deepest
end

"""
Throw `ExportError` unless manifest `m` (as built by `build_manifest`, or as read back with
`JSON.parsefile`) follows docs/bundle-format.md as JuliaBridge writes it: format 3 (every
dataset's digest under `blake3`), or format 2 (under `sha256`), the fallback when BLAKE3 failed
its self-test.

`returned` (result => argument, 0-based, from `returned_arguments` of the module the manifest
describes) also checks every `echo_of` claim against the module's structure, as the Python
reader does (spec §3.4); without it only the manifest's own rules are checked.
"""
function check_manifest(m; returned::Union{Nothing,AbstractDict{Int,Int}}=nothing)
    try
        check_manifest_rules(m; returned)
    catch err
        err isa ManifestRuleError || rethrow()
        v = m isa AbstractDict ? get(m, "format_version", nothing) : nothing
        format = v in (FORMAT_VERSION, FALLBACK_FORMAT_VERSION) ? " (format $v)" : ""
        throw(ExportError("the manifest would break docs/bundle-format.md$format at $(err.at): $(err.msg)"))
    end
    return nothing
end

function check_manifest_rules(m; returned::Union{Nothing,AbstractDict{Int,Int}}=nothing)
    top = "top level"
    m isa AbstractDict || rule_fail(top, "not a JSON object")
    get_typed(m, "format", AbstractString, top) == FORMAT || rule_fail("format", "expected $(repr(FORMAT))")
    version = get_typed(m, "format_version", Integer, top)
    scheme = version in (FORMAT_VERSION, FALLBACK_FORMAT_VERSION) ? digest_scheme_of(version) : nothing
    scheme === nothing &&
        rule_fail("format_version", "expected $FORMAT_VERSION (or $FALLBACK_FORMAT_VERSION, written when BLAKE3 failed its self-test), found $version")
    occursin(NAME_RE, get_typed(m, "name", AbstractString, top)) || rule_fail("name", "expected 1-128 characters of [A-Za-z0-9_.-]")
    mode = get_typed(m, "mode", AbstractString, top)
    mode in ("test", "train") || rule_fail("mode", "expected \"test\" or \"train\"")
    check_producer(get_typed(m, "producer", AbstractDict, top))
    check_files(m)
    args = check_arguments(get_typed(m, "arguments", AbstractVector, top), scheme)
    results = check_results(get_typed(m, "results", AbstractVector, top), args)
    returned === nothing || check_echo_claims(m["results"], returned)
    aliases = Tuple{Vector{Any},Int}[]
    for (j, al) in enumerate(get_typed(m, "aliases", AbstractVector, top))
        w = "aliases[$(j - 1)]"
        a = get_typed(al, "argument", Integer, w)
        0 <= a < length(args) || rule_fail("$w.argument", "no @main argument $a")
        push!(aliases, (check_output_path(get_typed(al, "path", AbstractVector, w), "$w.path"), Int(a)))
    end
    check_outputs(results, aliases, args)
    static = check_static_state(get(m, "static_state", Any[]), args)
    check_trees(m, args, static)
    batch = get(m, "batch", nothing)
    if batch !== nothing
        size_ = get_typed(batch, "size", Integer, "batch")
        size_ >= 1 || rule_fail("batch.size", "expected an integer >= 1, found $size_ (an input has an empty batch dimension)")
        independent = get_typed(batch, "samples_independent", Bool, "batch")
        (mode == "train" && independent) && rule_fail("batch.samples_independent", "must be false in train mode")
    end
    haskey(m, "examples") && check_examples(m["examples"], args, results, scheme)
    metadata = get(m, "metadata", nothing)
    (metadata === nothing || metadata isa AbstractDict) || rule_fail("metadata", "expected a JSON object")
    text = JSON.json(m; pretty=2)                                   # as write_manifest writes it
    depth = json_text_depth(text)
    depth > MAX_JSON_DEPTH && rule_fail("metadata", "the manifest nests $depth levels deep, more than the $MAX_JSON_DEPTH readers accept; flatten the metadata")
    bytes = sizeof(text)
    bytes > MAX_MANIFEST_BYTES && rule_fail("metadata", "the manifest is $bytes bytes, more than the $(MAX_MANIFEST_BYTES >> 20) MiB readers accept; keep large data out of the metadata")
    return nothing
end

function check_producer(p)
    w = "producer"
    tool = get_typed(p, "tool", AbstractString, w)
    made = get_typed(p, "made_with_julia", Bool, w)
    (tool == JULIA_TOOL && made) || rule_fail(w, "JuliaBridge writes tool $(repr(JULIA_TOOL)) with made_with_julia true")
    get_typed(p, "tool_version", AbstractString, w)
    for k in ("julia", "lux", "reactant")
        get_typed(p, k, AbstractString, w)
    end
    return nothing
end

function check_artifact(a, at)
    for k in ("stablehlo_version", "target")
        occursin(VERSION_RE, get_typed(a, k, AbstractString, at)) || rule_fail("$at.$k", "expected MAJOR.MINOR.PATCH in decimal")
    end
    VersionNumber(a["target"]) <= VersionNumber(a["stablehlo_version"]) ||
        rule_fail("$at.target", "target $(a["target"]) is newer than the writer's StableHLO $(a["stablehlo_version"])")
    check_hex(a, "sha256", at)
    return nothing
end

function check_files(m)
    taken = Dict(Base.Unicode.normalize(MANIFEST_FILE; casefold=true) => "the manifest")
    function claim(obj, at)
        name = get_typed(obj, "file", AbstractString, at)
        why = unsafe_file_name(name)
        why === nothing || rule_fail("$at.file", "$(repr(name)) $why")
        key = Base.Unicode.normalize(name; casefold=true)   # as Python's str.casefold for these names
        haskey(taken, key) && rule_fail("$at.file", "$(repr(name)) is also $(taken[key]); every file of a bundle has its own name")
        taken[key] = "$at.file"
    end
    for key in ("module", "weights", "vjp")
        (key == "vjp" && !haskey(m, key)) && continue
        obj = get_typed(m, key, AbstractDict, "top level")
        claim(obj, key)
        if key == "weights"
            haskey(obj, "sha256") && rule_fail("weights.sha256", "JuliaBridge omits the whole-file hash (optional in formats 2 and 3); datasets carry their own digests")
        else
            check_hex(obj, "sha256", key)
            if haskey(obj, "artifact")
                art = get_typed(obj, "artifact", AbstractDict, key)
                check_artifact(art, "$key.artifact")
                claim(art, "$key.artifact")
            end
        end
    end
    return nothing
end

function check_arguments(entries, scheme::DigestScheme)
    args = Any[]
    seen = Dict{Tuple{String,Vector{Any}},Int}()
    datasets = Set{String}()
    for (i, a) in enumerate(entries)
        w = "arguments[$(i - 1)]"
        get_typed(a, "index", Integer, w) == i - 1 || rule_fail("$w.index", "expected $(i - 1)")
        role = String(get_typed(a, "role", AbstractString, w))
        role in ("input", "parameter", "state") || rule_fail("$w.role", "unknown role $(repr(role))")
        dtype = get_typed(a, "dtype", AbstractString, w)
        shape = check_shape(get_typed(a, "shape", AbstractVector, w), dtype, "$w.shape")
        collect(get_typed(a, "julia_shape", AbstractVector, w)) == reverse(shape) || rule_fail("$w.julia_shape", "expected shape reversed")
        path = check_path(get_typed(a, "path", AbstractVector, w), "$w.path"; nonempty=role != "input")
        tied = Vector{Any}[check_path(p, "$w.tied_paths[$(k - 1)]"; nonempty=role != "input") for (k, p) in enumerate(get(a, "tied_paths", Any[]))]
        for p in vcat([path], tied)
            haskey(seen, (role, p)) && rule_fail(w, "$role path $(repr(p)) is also argument $(seen[(role, p)]); paths are unique")
            seen[(role, p)] = i - 1
        end
        if role == "input"
            haskey(a, "dataset") && rule_fail("$w.dataset", "an input has no dataset")
        else
            ds = get_typed(a, "dataset", AbstractString, w)
            occursin(DATASET_RE, ds) || rule_fail("$w.dataset", "expected an absolute HDF5 path")
            ds in datasets && rule_fail("$w.dataset", "$ds is used twice")
            push!(datasets, ds)
            check_digest(a, scheme, w)
        end
        axis = check_batch_axis(a, shape, w)
        push!(args, (; role, path, tied, dtype, shape, axis, dataset=get(a, "dataset", nothing)))
    end
    return args
end

function check_output_path(p, at)
    path = check_path(p, at; nonempty=true)
    first(path) in ("output", "state") || rule_fail(at, "an output path starts with \"output\" or \"state\"")
    return path
end

function check_results(entries, args)
    results = Any[]
    for (k, r) in enumerate(entries)
        w = "results[$(k - 1)]"
        get_typed(r, "index", Integer, w) == k - 1 || rule_fail("$w.index", "expected $(k - 1)")
        dtype = get_typed(r, "dtype", AbstractString, w)
        shape = check_shape(get_typed(r, "shape", AbstractVector, w), dtype, "$w.shape")
        paths = Vector{Any}[check_output_path(p, "$w.paths[$(j - 1)]") for (j, p) in enumerate(get_typed(r, "paths", AbstractVector, w))]
        axis = check_batch_axis(r, shape, w)
        echo = get(r, "echo_of", nothing)
        if echo === nothing
            isempty(paths) && rule_fail("$w.paths", "a result needs an output path unless it is an echo (echo_of)")
        else
            (is_int(echo) && 0 <= echo < length(args)) || rule_fail("$w.echo_of", "no @main argument $(repr(echo))")
            a = args[echo + 1]
            (a.shape, a.dtype) == (shape, dtype) || rule_fail(w, "an echo of argument $echo has its shape and dtype")
            a.axis == axis || rule_fail("$w.batch_axis", "an echo of argument $echo has its batch_axis $(repr(a.axis))")
        end
        push!(results, (; paths, dtype, shape))
    end
    return results
end

# Each `echo_of` is a claim about the module (spec §3.4): @main returns that block argument itself.
function check_echo_claims(entries, returned::AbstractDict{Int,Int})
    for (k, r) in enumerate(entries)
        echo = get(r, "echo_of", nothing)
        echo === nothing && continue
        found = get(returned, k - 1, nothing)
        found == echo && continue
        what = found === nothing ? "computes that result" : "returns argument $found there"
        rule_fail("results[$(k - 1)].echo_of", "claims @main result $(k - 1) is argument $echo returned unchanged, but the module $what")
    end
    return nothing
end

# Every output path once; every returned state path is a state argument's own path (spec §3.5).
function check_outputs(results, aliases, args)
    state = [a for a in args if a.role == "state"]
    state_args = Dict(a.path => a for a in state)
    tied_state = Dict(p => a for a in state for p in a.tied)
    returned = vcat(
        [(p, "results[$(k - 1)].paths", r.shape, r.dtype) for (k, r) in enumerate(results) for p in r.paths],
        [(p, "aliases[$(j - 1)].path", args[i + 1].shape, args[i + 1].dtype) for (j, (p, i)) in enumerate(aliases)],
    )
    seen = Set{Vector{Any}}()
    for (p, at, shape, dtype) in returned
        p in seen && rule_fail(at, "output path $(repr(p)) is listed twice")
        push!(seen, p)
        first(p) == "state" || continue
        a = get(state_args, p[2:end], nothing)
        if a === nothing
            t = get(tied_state, p[2:end], nothing)
            t === nothing && rule_fail(at, "$(repr(p)) is not the path of a state argument: the returned state must be the state tree")
            rule_fail(
                at,
                "st holds the same array at $(path_label(t.path)) and $(path_label(p[2:end])); the format returns a state array at its one path only, so pass a copy (`copy(a)`) for all but one place",
            )
        end
        (a.shape, a.dtype) == (shape, dtype) || rule_fail(at, "returns $dtype $shape for a state argument of $(a.dtype) $(a.shape)")
    end
    check_tree(collect(seen), "output paths")
    return nothing
end

function check_static_state(entries, args)
    entries isa AbstractVector || rule_fail("static_state", "expected an array")
    state = [a for a in args if a.role == "state"]
    state_paths = Set(p for a in state for p in vcat([a.path], a.tied))
    paths = Vector{Any}[]
    for (j, s) in enumerate(entries)
        w = "static_state[$(j - 1)]"
        path = check_path(get_typed(s, "path", AbstractVector, w), "$w.path"; nonempty=true)
        path in paths && rule_fail("$w.path", "$(repr(path)) is listed twice")
        path in state_paths && rule_fail("$w.path", "$(repr(path)) is also a state argument")
        push!(paths, path)
        haskey(s, "value") || rule_fail(w, "missing required key \"value\"")
        why = static_value_problem(s["value"])
        why === nothing || rule_fail("$w.value", "st.$(path_label(path)): $why; JuliaBridge records only such values of st")
        why = julia_type_problem(get(s, "julia_type", nothing))
        why === nothing || rule_fail("$w.julia_type", "st.$(path_label(path)): its type name $why")
    end
    return paths
end

function check_trees(m, args, static)
    empty = get(m, "empty", nothing)
    empties(k) = empty === nothing ? Vector{Any}[] : Vector{Any}[check_path(p, "empty.$k") for p in get_typed(empty, k, AbstractVector, "empty")]
    leaves(role) = Vector{Any}[p for a in filter(a -> a.role == role, args) for p in vcat([a.path], a.tied)]
    check_tree(leaves("input"), "input paths")
    check_tree(leaves("parameter"), "parameter paths"; containers=empties("params"))
    check_tree(vcat(leaves("state"), static), "state paths"; containers=empties("state"))
    return nothing
end

function check_examples(ex, args, results, scheme::DigestScheme)
    w = "examples"
    ex isa AbstractDict || rule_fail(w, "expected a JSON object")
    datasets = Set(a.dataset for a in args if a.dataset !== nothing)
    inputs = Set(i - 1 for (i, a) in enumerate(args) if a.role == "input")
    for (group, key, limit) in (("inputs", "argument", length(args)), ("outputs", "result", length(results)))
        seen = Set{Int}()
        for (j, e) in enumerate(get_typed(ex, group, AbstractVector, w))
            ew = "$w.$group[$(j - 1)]"
            i = get_typed(e, key, Integer, ew)
            0 <= i < limit || rule_fail("$ew.$key", "no $key $i")
            i in seen && rule_fail("$ew.$key", "$key $i is listed twice")
            push!(seen, i)
            (group == "inputs" && !(i in inputs)) && rule_fail("$ew.argument", "argument $i is not an input")
            ds = get_typed(e, "dataset", AbstractString, ew)
            occursin(DATASET_RE, ds) || rule_fail("$ew.dataset", "expected an absolute HDF5 path")
            ds in datasets && rule_fail("$ew.dataset", "$ds is used twice")
            push!(datasets, ds)
            check_digest(e, scheme, ew)
        end
        group == "inputs" && seen != inputs && rule_fail("$w.inputs", "must give every input argument exactly once")
        group == "outputs" && isempty(seen) && rule_fail("$w.outputs", "must list at least one result")
    end
    for key in ("rtol", "atol")
        v = get(ex, key, nothing)
        v === nothing && continue
        (v isa Real && !(v isa Bool) && 0 <= v < 1e6) || rule_fail("$w.$key", "expected a number in [0, 1e6)")
    end
    return nothing
end
