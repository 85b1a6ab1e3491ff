# The same models through Reactant's own exporter, as the Lux manual calls it
# (Reactant src/serialization/EnzymeJAX.jl:88-96, `export_to_enzymejax(f, args...; output_dir,
# function_name)`; NPZ loaded for the inputs file, Reactant ext/ReactantNPZExt.jl):
#   julia --project=ENV export_reactant.jl MODEL.jl OUT_DIR LUX.json
# writes OUT_DIR/model.py, model_0.mlir and model_0_inputs.npz, and LUX.json (Lux's CPU outputs,
# outside the exporter's directory).
using JSON: JSON
using Lux, NPZ, Reactant

const MODEL_SCRIPT, OUT, LUX_JSON = abspath(ARGS[1]), abspath(ARGS[2]), abspath(ARGS[3])
const M = Module(:E2EModel)
Core.eval(M, :(include(path::AbstractString) = Base.include($M, path)))
Base.include(M, MODEL_SCRIPT)
m = Base.invokelatest(() -> (; model=M.model, ps=M.ps, st=M.st, x=M.x, mode=M.export_mode, metadata=M.metadata))
mkpath(OUT)
write(LUX_JSON, JSON.json(m.metadata))
x_ra = Reactant.to_rarray(m.x)
if m.model isa StatefulLuxLayer
    # export_to_enzymejax(smodel, x): ps and st travel inside the layer (its fields).
    Reactant.Serialization.export_to_enzymejax(Reactant.to_rarray(m.model), x_ra; output_dir=OUT, function_name="model")
else
    st_mode = m.mode === :test ? Lux.testmode(m.st) : Lux.trainmode(m.st)
    Reactant.Serialization.export_to_enzymejax(m.model, x_ra, Reactant.to_rarray(m.ps), Reactant.to_rarray(st_mode);
                                               output_dir=OUT, function_name="model")
end
println("wrote ", OUT)
