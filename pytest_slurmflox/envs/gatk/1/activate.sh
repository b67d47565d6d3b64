# Activation hook of local/gatk:1: like a Flox environment that materializes a conda env on activation.
export GATK_CONDAENV_PREFIX="$FLOX_ENV/opt/conda/envs/gatk"
export PATH="$GATK_CONDAENV_PREFIX/bin:$PATH"
