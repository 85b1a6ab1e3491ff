# Entry points for Python.
#
# The `julia` subprocess route (`juliabridge export SCRIPT.jl --out DIR`, juliabridge/julia/driver.py):
#   julia --project=ENV --startup-file=no -e 'using JuliaBridge; exit(JuliaBridge.run_request(ARGS[1]))' REQUEST.json
# The request is a JSON object; the answer is written to request["result_file"] as JSON.
# Progress goes to stdout as lines `[juliabridge:progress] STEP/NSTEPS MESSAGE`.
#
# The juliacall route (`juliabridge.export_lux(model, ps, st, *inputs, out=...)`,
# juliabridge/julia/session.py) calls `export_from_python` in the Python process's own Julia
# session with the Julia objects themselves; the answer is returned as the same JSON text.

const SCRIPT_NAMES = (:model, :ps, :st, :x)

"""
A fresh module for a user's script. `Module(name)` gives neither `include` nor `eval` (only
the `module` keyword defines them), so both are defined the way `module` does: a script can
`include("layers.jl")` next to itself and `eval` into its own namespace.
"""
function script_module()::Module
    mod = Module(:JuliaBridgeScript)
    Core.eval(mod, :(eval(x) = Core.eval($mod, x)))
    Core.eval(mod, :(include(path::AbstractString) = Base.include($mod, path)))
    Core.eval(mod, :(include(mapexpr::Function, path::AbstractString) = Base.include(mapexpr, $mod, path)))
    return mod
end

"""
Include the user's script in a fresh module and return (model, ps, st, x, metadata, name).
The script must define `model`, `ps`, `st` and `x` (the example input: one array, or a tuple
for several inputs); it may define `metadata` (an AbstractDict) and `name` (a String).
"""
function load_script(script::AbstractString)
    isfile(script) || throw(ArgumentError("no such script: $script"))
    mod = script_module()
    Base.include(mod, abspath(script))
    missing_ = [n for n in SCRIPT_NAMES if !isdefined(mod, n)]
    isempty(missing_) || throw(
        ArgumentError("$script must define $(join(SCRIPT_NAMES, ", ")); it does not define $(join(missing_, ", "))"),
    )
    get_(n, default) = isdefined(mod, n) ? getfield(mod, n) : default
    metadata = get_(:metadata, Dict{String,Any}())
    metadata isa AbstractDict || throw(ArgumentError("metadata in $script must be an AbstractDict"))
    name = get_(:name, nothing)
    return (; model=getfield(mod, :model), ps=getfield(mod, :ps), st=getfield(mod, :st), x=getfield(mod, :x), metadata, name)
end

function print_progress(step, nsteps, msg)
    println(stdout, "[juliabridge:progress] $step/$nsteps $msg")
    flush(stdout)
    return nothing
end

"""
The keyword arguments of `export_model` from a request object (JSON from Python): `name`,
`mode`, `overwrite`, `reference`, `vjp`, `metadata` (merged over `metadata`), `allow_custom_calls`,
`samples_independent`. Absent or null keys take `export_model`'s defaults.
"""
function export_options(req::AbstractDict, metadata::AbstractDict=Dict{String,Any}(); name=nothing)
    meta = Dict{String,Any}(string(k) => v for (k, v) in pairs(metadata))
    extra = get(req, "metadata", nothing)
    extra === nothing || merge!(meta, Dict{String,Any}(string(k) => v for (k, v) in pairs(extra)))
    flag(k, default) = (v = get(req, k, nothing); v === nothing ? default : Bool(v))
    si = get(req, "samples_independent", nothing)
    return (;
        name=something(get(req, "name", nothing), name, Some(nothing)),
        mode=Symbol(something(get(req, "mode", nothing), "test")),
        overwrite=flag("overwrite", false),
        reference=flag("reference", true),
        vjp=flag("vjp", false),
        metadata=meta,
        allow_custom_calls=flag("allow_custom_calls", false),
        samples_independent=si === nothing ? nothing : Bool(si),
    )
end

"""
Run `f()` (an export returning the bundle path) and describe the outcome as the answer object
Python reads: `{"ok": true, "path": ...}` or `{"ok": false, "error_type", "message", "backtrace"}`.
"""
function answer(f)
    try
        return jobject("ok" => true, "path" => f())
    catch err
        err isa InterruptException && rethrow()
        return jobject(
            "ok" => false,
            "error_type" => string(nameof(typeof(err))),
            "message" => sprint(showerror, err),
            "backtrace" => sprint(Base.show_backtrace, catch_backtrace()),
        )
    end
end

"""Run the export described by the JSON file `request_path`; return the process exit code."""
function run_request(request_path::AbstractString)::Int
    req = JSON.parsefile(request_path)
    result_file = String(req["result_file"])
    result = answer() do
        print_progress(0, 0, "loading $(req["script"])")
        s = load_script(String(req["script"]))
        opts = export_options(req, s.metadata; name=s.name)
        # The script may define types and methods: call into them in the latest world.
        Base.invokelatest(export_model, String(req["out"]), s.model, s.ps, s.st, s.x; opts..., progress=print_progress)
    end
    write_manifest(result_file, result)
    return result["ok"] ? 0 : 1
end

# Plain numeric arrays that are not `Array`s (juliacall's `PyArray` over a NumPy array, views)
# as `Array`s, which Reactant converts to Reactant arrays; identity is kept, so an array passed
# twice stays one array.
function as_arrays(v, seen::IdDict{Any,Any}=IdDict{Any,Any}())
    if v isa AbstractArray{<:Number} && !(v isa Array) && !(v isa ReactantLeaf)
        return get!(() -> Array(v), seen, v)
    elseif v isa Tuple || v isa NamedTuple
        return map(c -> as_arrays(c, seen), v)
    end
    return v
end

"""
    export_from_python(out, model, ps, st, options_json, inputs...; progress=nothing) -> String

The juliacall route: export `model(x, ps, st)` (Julia objects of the calling session) to `out`
with the options of JSON object `options_json` (the keys of `export_options`), and return the
answer object as JSON text, as `run_request` writes it. Non-`Array` numeric arrays among the
inputs (NumPy arrays arrive as `PyArray`s, already in Julia's dimension order) are copied to
`Array`s first.
"""
function export_from_python(out::AbstractString, model, ps, st, options_json::AbstractString, inputs...; progress=nothing)::String
    result = answer() do
        isempty(inputs) && throw(ArgumentError("export_lux needs at least one example input"))
        req = JSON.parse(options_json)
        opts = export_options(req)
        xs = map(as_arrays, inputs)
        x = length(xs) == 1 ? only(xs) : xs
        Base.invokelatest(export_model, String(out), model, ps, st, x; opts..., progress)
    end
    return JSON.json(result)
end
