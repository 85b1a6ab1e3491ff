# Writing a bundle directory atomically: build it in a temporary directory next to the target,
# then rename. An interrupted export leaves at most a hidden `.NAME.tmp-*` directory, never a
# half-written bundle at the target.

"""Throw `BundleExistsError` unless `target` is absent, or `overwrite` and it is a bundle."""
function check_target(target::AbstractString, overwrite::Bool)
    ispath(target) || return nothing
    overwrite || throw(BundleExistsError(target, "it already exists; pass overwrite=true to replace it"))
    (isdir(target) && !islink(target)) || throw(BundleExistsError(target, "it exists and is not a directory"))
    (isempty(readdir(target)) || isfile(joinpath(target, MANIFEST_FILE))) ||
        throw(BundleExistsError(target, "it is a non-empty directory without $MANIFEST_FILE, so not a bundle"))
    return nothing
end

"""
Run `build(tmpdir)` to create the bundle's files in a fresh directory next to `target`, then
move it into place (replacing an existing bundle only when `overwrite`). Returns `target`.
"""
function write_atomically(build::Function, target::AbstractString; overwrite::Bool)
    parent = dirname(target)
    mkpath(parent)
    tmp = mktempdir(parent; prefix=".$(basename(target)).tmp-", cleanup=false)
    try
        chmod(tmp, 0o755)                   # mktempdir makes it 0700; a bundle is shared data
        build(tmp)
        check_target(target, overwrite)     # again: something may have appeared meanwhile
        if ispath(target)
            old = joinpath(parent, ".$(basename(target)).old-$(Random.randstring(8))")
            mv(target, old)
            try
                mv(tmp, target)
            catch
                mv(old, target)             # put the previous bundle back
                rethrow()
            end
            rm(old; recursive=true, force=true)
        else
            mv(tmp, target)
        end
    catch
        rm(tmp; recursive=true, force=true)
        rethrow()
    end
    return target
end
