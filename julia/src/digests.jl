# Per-dataset digests (spec §4.1): which hash a bundle format uses for its datasets, and which
# one the writer uses in this session. Format 3 hashes each dataset's canonical bytes with
# BLAKE3 (blake3.jl) under the key `blake3`; format 2 with sha256 under `sha256`; format 1 has
# no per-dataset digests. The canonical bytes themselves are weights.jl's `canonical_encoding`.

"""
How a bundle's datasets are digested (spec §4.1): the manifest's `format_version`, the key of
each dataset's digest in `arguments[i]` and `examples.inputs/outputs[j]`, and the hash
function (`:blake3` or `:sha256`) over the canonical bytes.
"""
struct DigestScheme
    format_version::Int
    key::String
    algorithm::Symbol
end

# Format 3 (what JuliaBridge writes): BLAKE3. Format 2 (what it writes when BLAKE3 failed its
# self-test in this session, and reads): sha256, the writer's output before format 3.
const DIGEST_SCHEME = DigestScheme(FORMAT_VERSION, DIGEST_KEY, :blake3)
const FALLBACK_DIGEST_SCHEME = DigestScheme(FALLBACK_FORMAT_VERSION, FALLBACK_DIGEST_KEY, :sha256)

"""The per-dataset digests of bundle format `version`; `nothing` for format 1, which has none (spec §8)."""
function digest_scheme_of(version::Integer)::Union{Nothing,DigestScheme}
    version == DIGEST_SCHEME.format_version && return DIGEST_SCHEME
    version == FALLBACK_DIGEST_SCHEME.format_version && return FALLBACK_DIGEST_SCHEME
    return nothing
end

"""
The digests the writer uses in this session: format 3's BLAKE3 when JuliaBridge's BLAKE3 passed
its known-answer self-test (`blake3_selftest`, run once per session); otherwise format 2's
sha256, with a warning naming `target`, the bundle about to be written.
"""
function writer_digest_scheme(target::AbstractString)::DigestScheme
    problem = blake3_selftest_problem()
    problem === nothing && return DIGEST_SCHEME
    @warn "JuliaBridge's BLAKE3 implementation failed its self-test ($problem), so $target is written in bundle format $(FALLBACK_DIGEST_SCHEME.format_version) (sha256 dataset digests) instead of format $(DIGEST_SCHEME.format_version). Every juliabridge reads format 2. Please report this to the juliabridge developers, with this message and the output of versioninfo()."
    return FALLBACK_DIGEST_SCHEME
end

"""Why a format-3 (BLAKE3) digest cannot be checked in this session, after the self-test's `problem`."""
blake3_unusable(problem::AbstractString)::String =
    "JuliaBridge's BLAKE3 implementation failed its self-test in this session ($problem), so it cannot check format-$(DIGEST_SCHEME.format_version) (BLAKE3) dataset digests. Please report this to the juliabridge developers, with this message and the output of versioninfo()."

"""`bytes` hashed with `algorithm` (`:blake3` or `:sha256`), as 64 lowercase hex digits."""
function hex_digest(bytes::AbstractVector{UInt8}, algorithm::Symbol)::String
    algorithm === :blake3 && return blake3_hex(bytes)                 # blake3.jl
    algorithm === :sha256 && return bytes2hex(SHA.sha256(bytes))      # SHA src/SHA.jl:95-99
    throw(ArgumentError("unknown digest algorithm :$algorithm; the bundle formats use :blake3 (format 3) and :sha256 (format 2)"))
end
