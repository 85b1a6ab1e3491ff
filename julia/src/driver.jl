# Entry point for the Python driver (`juliabridge export SCRIPT.jl --out DIR`), run as
#   julia --project=ENV --startup-file=no -e 'using JuliaBridge; exit(JuliaBridge.run_request(ARGS[1]))' REQUEST.json
# The request is a JSON object; the answer is written to request["result_file"] as JSON.
# Progress goes to stdout as lines `[juliabridge:progress] STEP/NSTEPS MESSAGE`.

const SCRIPT_NAMES = (:model, :ps, :st, :x)

"""
Include the user's script in a fresh module and return (model, ps, st, x, metadata).
The script must define `model`, `ps`, `st` and `x` (the example input: one array, or a tuple
for several inputs); it may define `metadata` (an AbstractDict) and `name` (a String).
"""
function load_script(script::AbstractString)
    isfile(script) || throw(ArgumentError("no such script: $script"))
    mod = Module(:JuliaBridgeScript)
    Base.include(mod, script)
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

"""Run the export described by the JSON file `request_path`; return the process exit code."""
function run_request(request_path::AbstractString)::Int
    req = JSON.parsefile(request_path)
    result_file = String(req["result_file"])
    result = try
        print_progress(0, 0, "loading $(req["script"])")
        s = load_script(String(req["script"]))
        metadata = Dict{String,Any}(string(k) => v for (k, v) in pairs(s.metadata))
        extra = get(req, "metadata", nothing)
        extra === nothing || merge!(metadata, Dict{String,Any}(string(k) => v for (k, v) in pairs(extra)))
        name = something(get(req, "name", nothing), s.name, Some(nothing))
        mode = Symbol(get(req, "mode", "test"))
        # The script may define types and methods: call into them in the latest world.
        path = Base.invokelatest(
            export_model,
            String(req["out"]),
            s.model,
            s.ps,
            s.st,
            s.x;
            name,
            mode,
            overwrite=Bool(get(req, "overwrite", false)),
            reference=Bool(get(req, "reference", true)),
            vjp=Bool(get(req, "vjp", false)),
            metadata,
            allow_custom_calls=Bool(get(req, "allow_custom_calls", false)),
            samples_independent=get(req, "samples_independent", nothing),
            progress=print_progress,
        )
        jobject("ok" => true, "path" => path)
    catch err
        err isa InterruptException && rethrow()
        jobject(
            "ok" => false,
            "error_type" => string(nameof(typeof(err))),
            "message" => sprint(showerror, err),
            "backtrace" => sprint(Base.show_backtrace, catch_backtrace()),
        )
    end
    write_manifest(result_file, result)
    return result["ok"] ? 0 : 1
end
