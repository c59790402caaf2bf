// The device plugin's state on its node, for the extender: the node annotation
// gpumux.io/device-plugin, written by the node agent (node_agent.h) with the same merge patch
// as the GPU inventory. The names are the extender's (kube/node_lock.h): the node lock is taken
// only while the plugin is ready.
//
//   starting  written before the plugin registers with the kubelet (and again when the kubelet
//             restarted and the plugin has not registered with the new one yet)
//   ready     every resource the plugin serves (gpumux.io/gpu, gpu-mem, gpu-milli) is
//             registered and the kubelet has opened ListAndWatch on each and received its list
//   stopping  written on SIGTERM/SIGINT before the plugin stops serving
// No annotation: no gpumux device plugin has run on the node (or one from before this
// annotation). A plugin that is killed (SIGKILL, OOM, node crash) leaves the last value
// behind, so a reader should also look at the node's allocatable gpumux.io resources: the
// kubelet marks a plugin's devices unhealthy (allocatable 0) once its endpoint has gone.
#pragma once

#include "gpumux/kube/node_lock.h"

namespace gpumux::deviceplugin {

using kube::kAnnotationDevicePlugin;
using kube::kDevicePluginReady;
using kube::kDevicePluginStarting;
using kube::kDevicePluginStopping;

}  // namespace gpumux::deviceplugin
