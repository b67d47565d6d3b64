# Activation hook of local/demo:1 (sourced by bash; FLOX_ENV is the realized path).
export SLURMFLOX_DEMO_GENERATION=1
