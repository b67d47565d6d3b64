# Activation hook of local/failhook:1: fails on purpose (like a hook whose materialization step breaks).
echo "failhook: activation refused on purpose" >&2
return 1
