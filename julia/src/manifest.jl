# manifest.json (spec §3). Objects are `JSON.Object`s: JSON.jl's own insertion-ordered dict,
# written in insertion order by every JSON.jl 1.x (JSON src/object.jl:1-60; plain `Dict`s
# are sorted by default since 1.5, JSON src/write.jl `_sort_keys_by_default`).

jobject(pairs::Pair...) = JSON.Object{String,Any}(pairs...)

"""sha256 of a file's bytes as 64 lowercase hex digits."""
file_sha256(path::AbstractString)::String = bytes2hex(open(SHA.sha256, path))

function version_string(m::Module)
    v = pkgversion(m)
    return v === nothing ? "unknown" : string(v)
end

function producer_object()
    return jobject(
        "tool" => JULIA_TOOL,                                # spec §3.2: with made_with_julia
        "tool_version" => version_string(@__MODULE__),
        "julia" => string(VERSION),
        "lux" => version_string(Lux),
        "reactant" => version_string(Reactant),
        "made_with_julia" => true,
        "created" => Dates.format(Dates.now(Dates.UTC), Dates.DateFormat("yyyy-mm-ddTHH:MM:SS")) * "Z",
    )
end

# A parameter or state argument's entry names its dataset and the dataset's digest, under
# `scheme.key` (spec §4.1: "blake3" in format 3, "sha256" in format 2).
function argument_object(a::ArgumentInfo, dataset::Union{Nothing,String}, digest::Union{Nothing,String}, batch_axis, scheme::DigestScheme)
    o = jobject(
        "index" => a.index,
        "role" => a.role,
        "path" => a.path,
        "dtype" => a.dtype,
        "shape" => reverse(a.julia_shape),
        "julia_shape" => a.julia_shape,
    )
    if dataset !== nothing
        o["dataset"] = dataset
        o[scheme.key] = digest
    end
    a.role == "input" && (o["batch_axis"] = batch_axis)
    isempty(a.tied_paths) || (o["tied_paths"] = a.tied_paths)
    return o
end

function result_object(r::ResultInfo, batch_axis)
    o = jobject(
        "index" => r.index,
        "paths" => r.paths,
        "dtype" => r.dtype,
        "shape" => reverse(r.julia_shape),
        "batch_axis" => batch_axis,
    )
    r.echo_of === nothing || (o["echo_of"] = r.echo_of)
    return o
end

"""
`{"file", "sha256"}` of a module file in `dir`, with its portable artifact when one was
written (`artifact === nothing` otherwise).
"""
function module_object(dir, file::AbstractString, artifact)
    o = jobject("file" => file, "sha256" => file_sha256(joinpath(dir, file)))
    artifact === nothing || (o["artifact"] = artifact)
    return o
end

"""
The manifest of a bundle whose files are already in `dir`, in the format of `scheme` (format 3,
`DIGEST_SCHEME`, unless BLAKE3 failed its self-test: then format 2, `FALLBACK_DIGEST_SCHEME`).
- `digests`: what `write_weights` returned (per-dataset digests of `scheme.algorithm`);
- `examples`: `nothing` or `(; inputs, outputs, rtol, atol)` with dataset paths;
- `batch`: `nothing` or `(; size, samples_independent)`;
- `empty`: the paths of empty containers in ps and st (spec §3.10);
- `static`: the static leaves of st (spec `static_state`);
- `artifacts`: `(; forward, vjp)` artifact objects or `nothing`.
The whole-file `weights.sha256` of format 1 is optional in formats 2 and 3 and not written:
readers verify each dataset's digest instead.
"""
function build_manifest(
    dir, name, mode, traced::TracedForward, datasets, digests, examples, batch, has_vjp::Bool, metadata;
    empty=(; params=Vector{Any}[], state=Vector{Any}[]),
    static::Vector{StaticLeaf}=StaticLeaf[],
    artifacts=(; forward=nothing, vjp=nothing),
    scheme::DigestScheme=DIGEST_SCHEME,
)
    B = batch === nothing ? nothing : batch.size
    m = jobject(
        "format" => FORMAT,
        "format_version" => scheme.format_version,
        "name" => name,
        "producer" => producer_object(),
        "module" => module_object(dir, MODULE_FILE, artifacts.forward),
        "weights" => jobject("file" => WEIGHTS_FILE),
        "mode" => String(mode),
        "arguments" => Any[
            argument_object(a, get(datasets, a.index, nothing), get(digests.args, a.index, nothing), input_batch_axis(a, B), scheme) for
            a in traced.arguments
        ],
        "results" => Any[result_object(r, result_batch_axis(r, B, traced)) for r in traced.results],
        "aliases" => Any[jobject("path" => al.path, "argument" => al.argument) for al in traced.aliases],
    )
    if !isempty(empty.params) || !isempty(empty.state)
        m["empty"] = jobject("params" => empty.params, "state" => empty.state)
    end
    if !isempty(static)
        m["static_state"] = Any[jobject("path" => s.path, "value" => s.value, "julia_type" => s.julia_type) for s in static]
    end
    batch === nothing || (m["batch"] = jobject("size" => batch.size, "samples_independent" => batch.samples_independent))
    if examples !== nothing
        m["examples"] = jobject(
            "inputs" => Any[jobject("argument" => i, "dataset" => d, scheme.key => digests.inputs[i]) for (i, d) in examples.inputs],
            "outputs" => Any[jobject("result" => k, "dataset" => d, scheme.key => digests.outputs[k]) for (k, d) in examples.outputs],
            "rtol" => examples.rtol,
            "atol" => examples.atol,
        )
    end
    has_vjp && (m["vjp"] = module_object(dir, VJP_FILE, artifacts.vjp))
    isempty(metadata) || (m["metadata"] = metadata)
    return m
end

"""Write `manifest` as pretty-printed UTF-8 JSON."""
function write_manifest(path::AbstractString, manifest)
    open(path, "w") do io
        JSON.json(io, manifest; pretty=2)                            # JSON src/write.jl:460-475
        write(io, '\n')
    end
    return nothing
end
