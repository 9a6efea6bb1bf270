/* core/plugin/host.h — the host table handed to plugins. */
#ifndef BORA_CORE_HOST_H
#define BORA_CORE_HOST_H

#include "registry.h"

/* Fill h with the host's functions; ctx points at the plugin file so messages carry its name. */
void bora_host_init_for_plugin(bora_host *h, bora_plugin_file *f);

#endif
