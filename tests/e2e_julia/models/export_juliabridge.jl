# JuliaBridge.export_lux called from Julia (no Python driver):
#   julia --project=ENV export_juliabridge.jl MODEL.jl OUT_DIR
# MODEL.jl defines model, ps, st, x, export_mode and metadata (tests/e2e_julia/models/*.jl).
using JuliaBridge: JuliaBridge

const MODEL_SCRIPT, OUT = abspath(ARGS[1]), abspath(ARGS[2])
const M = Module(:E2EModel)
Core.eval(M, :(include(path::AbstractString) = Base.include($M, path)))
Base.include(M, MODEL_SCRIPT)
m = Base.invokelatest(() -> (; model=M.model, ps=M.ps, st=M.st, x=M.x, mode=M.export_mode, metadata=M.metadata))
inputs = m.x isa Tuple ? m.x : (m.x,)
path = JuliaBridge.export_lux(OUT, m.model, m.ps, m.st, inputs...; mode=m.mode, metadata=m.metadata, overwrite=true)
println("wrote ", path)
