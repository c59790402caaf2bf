#!/bin/busybox sh
# A stand-in for nvidia-cuda-mps-control, for tests without a GPU (tests/deviceplugin/mps_test.cc
# and the e2e's MPS scenario). It records what it is asked in $CUDA_MPS_LOG_DIRECTORY/control.log:
#   -f                  "start <CUDA_VISIBLE_DEVICES> <CUDA_MPS_PIPE_DIRECTORY>", makes the pipe
#                       folder's control file and pid file, then runs until the pid file goes
#   a command on stdin  "cmd <command>"; get_server_list prints one server, 4242; quit removes
#                       the pid file (the -f process then exits)
# MPS v3 (NVIDIA's "-p 3" interface), only when $GPUMUX_MPS_STANDIN_V3 is set (as a driver before
# r615 would, it otherwise refuses -p):
#   -p 3 -h             lists the modules (server, namespace, ...)
#   -f -p 3             as -f, recorded as "start3 ..."
#   -p 3 MODULE VERB .. "cmd3 MODULE VERB ..."; server create S makes <pipe>/S, namespace create
#                       N --server=S makes <pipe>/S/N with its control file, namespace delete N
#                       --server=S removes it
log="$CUDA_MPS_LOG_DIRECTORY/control.log"
pidfile="$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
v3=""
if [ "$1" = "-f" ] && [ "$2" = "-p" ]; then set -- -p "$3" -f; fi
if [ "$1" = "-p" ]; then
  if [ -z "${GPUMUX_MPS_STANDIN_V3:-}" ]; then echo "unknown option -p" >&2; exit 1; fi
  [ "$2" = "3" ] || { echo "unknown protocol $2" >&2; exit 1; }
  shift 2
  v3=3
  if [ "$1" = "-h" ]; then
    echo "Usage: nvidia-cuda-mps-control -p 3 <module> <verb> ..."
    echo "Modules: server namespace client device sm-partition feature memacct context-share"
    exit 0
  fi
fi
if [ "$1" = "-f" ]; then
  echo "start$v3 $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY" >> "$log"
  : > "$CUDA_MPS_PIPE_DIRECTORY/control"
  echo $$ > "$pidfile"
  while [ -e "$pidfile" ]; do sleep 0.05; done
  exit 0
fi
if [ -n "$v3" ]; then
  echo "cmd3 $*" >> "$log"
  server=""
  for a in "$@"; do case "$a" in --server=*) server="${a#--server=}" ;; esac; done
  case "$1 $2" in
    "server create") mkdir -p "$CUDA_MPS_PIPE_DIRECTORY/$3" ;;
    "namespace create")
      mkdir -p "$CUDA_MPS_PIPE_DIRECTORY/$server/$3" && : > "$CUDA_MPS_PIPE_DIRECTORY/$server/$3/control" ;;
    "namespace delete") rm -rf "$CUDA_MPS_PIPE_DIRECTORY/$server/$3" ;;
  esac
  exit 0
fi
read -r cmd
echo "cmd $cmd" >> "$log"
case "$cmd" in
  get_server_list) echo 4242 ;;
  quit) rm -f "$pidfile" ;;
esac
exit 0
