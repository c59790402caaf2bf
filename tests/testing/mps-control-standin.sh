#!/bin/busybox sh
# A stand-in for nvidia-cuda-mps-control, for tests without a GPU (tests/deviceplugin/mps_test.cc
# and the e2e's MPS scenario). It records what it is asked in $CUDA_MPS_LOG_DIRECTORY/control.log:
#   -f                  "start <CUDA_VISIBLE_DEVICES> <CUDA_MPS_PIPE_DIRECTORY>", makes the pipe
#                       folder's control file and pid file, then runs until the pid file goes
#   a command on stdin  "cmd <command>"; get_server_list prints one server, 4242; quit removes
#                       the pid file (the -f process then exits)
log="$CUDA_MPS_LOG_DIRECTORY/control.log"
pidfile="$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
if [ "$1" = "-f" ]; then
  echo "start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY" >> "$log"
  : > "$CUDA_MPS_PIPE_DIRECTORY/control"
  echo $$ > "$pidfile"
  while [ -e "$pidfile" ]; do sleep 0.05; done
  exit 0
fi
read -r cmd
echo "cmd $cmd" >> "$log"
case "$cmd" in
  get_server_list) echo 4242 ;;
  quit) rm -f "$pidfile" ;;
esac
exit 0
