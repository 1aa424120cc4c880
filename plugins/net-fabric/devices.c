/*
 * Device discovery: one device per network interface that the provider offers an RDM
 * endpoint on, with its properties read from sysfs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "fabric.h"

/* Provider used when FI_PROVIDER does not name one: plain TCP works on every host. */
#define DEFAULT_PROVIDER "tcp"
/* Speed reported when sysfs does not know the link's (loopback, veth, many VMs). */
#define DEFAULT_SPEED_MBPS 10000
/* Communicators a device may carry: bounded by file descriptors, not by the plugin. */
#define MAX_COMMS 65536
#define MAX_DEVICES 64

struct fab_device {
  struct fi_info* info;
  char name[IF_NAMESIZE + 1];
  char* pci_path;
  int speed_mbps;
  pthread_mutex_t lock;
  struct fid_fabric* fabric;
  struct fid_domain* domain;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static int discovered;
static int ndevices;
static struct fab_device devices[MAX_DEVICES];

static struct fi_info* make_hints(void) {
  struct fi_info* hints = fi_allocinfo();
  if (hints == NULL) return NULL;
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
  hints->mode = FI_CONTEXT;
  hints->ep_attr->type = FI_EP_RDM;
  /* Registration modes this plugin can honour; MR_ENDPOINT (binding to one endpoint) is not. */
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  /* Communicators of one device share its domain and may be driven from several threads. */
  hints->domain_attr->threading = FI_THREAD_SAFE;
  /* With FI_PROVIDER set, libfabric filters by it; otherwise stay on TCP rather than let a
   * shared-memory or UDP provider that happens to be installed take over. */
  if (getenv("FI_PROVIDER") == NULL) hints->fabric_attr->prov_name = strdup(DEFAULT_PROVIDER);
  return hints;
}

static int read_speed(const char* ifname) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "/sys/class/net/%s/speed", ifname);
  FILE* f = fopen(path, "r");
  if (f == NULL) return DEFAULT_SPEED_MBPS;
  int speed = 0;
  /* Virtual links read -1 or fail with EINVAL. */
  if (fscanf(f, "%d", &speed) != 1 || speed <= 0) speed = DEFAULT_SPEED_MBPS;
  fclose(f);
  return speed;
}

static int is_pci_address(const char* component, size_t len) {
  unsigned domain, bus, slot, function;
  char tail;
  char text[32];
  if (len >= sizeof text) return 0;
  memcpy(text, component, len);
  text[len] = '\0';
  return sscanf(text, "%x:%x:%x.%x%c", &domain, &bus, &slot, &function, &tail) == 4;
}

/* The sysfs path of the interface's PCI function. NCCL reads the bus id from the path's last
 * component, so a child below the function (a virtio device) is cut off. */
static char* read_pci_path(const char* ifname) {
  char link[PATH_MAX];
  snprintf(link, sizeof link, "/sys/class/net/%s/device", ifname);
  char* real = realpath(link, NULL);
  if (real == NULL) return NULL;
  char* end = NULL;
  for (char* c = strchr(real, '/'); c != NULL; c = strchr(c + 1, '/')) {
    char* next = strchr(c + 1, '/');
    size_t len = next ? (size_t)(next - c - 1) : strlen(c + 1);
    if (is_pci_address(c + 1, len)) end = c + 1 + len;
  }
  if (end == NULL) {
    /* Not on a PCI bus (virtio-mmio, a platform NIC): no PCI path. */
    free(real);
    return NULL;
  }
  *end = '\0';
  return real;
}

/* Several entries name the same interface (address families, progress variants): keep the
 * first IPv4 one of each interface, else its first entry. */
static void add_entry(struct fi_info* entry, const char* pinned_iface) {
  const char* ifname = entry->domain_attr->name;
  if (ifname == NULL || strlen(ifname) > IF_NAMESIZE) return;
  /* FI_TCP_IFACE is the tcp provider's own filter; applying it here too keeps the pin when
   * FI_PROVIDER selects a provider that ignores it. */
  if (pinned_iface != NULL && strcmp(pinned_iface, ifname) != 0) return;
  for (int i = 0; i < ndevices; i++) {
    if (strcmp(devices[i].name, ifname) != 0) continue;
    if (devices[i].info->addr_format != FI_SOCKADDR_IN && entry->addr_format == FI_SOCKADDR_IN) {
      struct fi_info* better = fi_dupinfo(entry);
      if (better != NULL) {
        fi_freeinfo(devices[i].info);
        devices[i].info = better;
      }
    }
    return;
  }
  if (ndevices == MAX_DEVICES) return;
  struct fab_device* d = &devices[ndevices];
  d->info = fi_dupinfo(entry);
  if (d->info == NULL) return;
  snprintf(d->name, sizeof d->name, "%s", ifname);
  d->pci_path = read_pci_path(ifname);
  d->speed_mbps = read_speed(ifname);
  pthread_mutex_init(&d->lock, NULL);
  ndevices++;
}

static ncclResult_t discover(void) {
  struct fi_info* hints = make_hints();
  if (hints == NULL) {
    FAB_WARN("out of memory allocating fi_info hints");
    return ncclSystemError;
  }
  struct fi_info* list = NULL;
  int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc == -FI_ENODATA) {
    /* No usable provider or interface: a valid answer (0 devices), not a failure. */
    FAB_INFO("no RDM endpoint offered by provider %s",
             getenv("FI_PROVIDER") ? getenv("FI_PROVIDER") : DEFAULT_PROVIDER);
    return ncclSuccess;
  }
  if (rc != 0) {
    FAB_WARN("fi_getinfo failed: %s", fi_strerror(-rc));
    return ncclSystemError;
  }
  const char* pinned = getenv("FI_TCP_IFACE");
  if (pinned != NULL && pinned[0] == '\0') pinned = NULL;
  for (struct fi_info* e = list; e != NULL; e = e->next) add_entry(e, pinned);
  fi_freeinfo(list);
  for (int i = 0; i < ndevices; i++) {
    FAB_INFO("device %d: %s via %s, %d Mbps%s%s", i, devices[i].name, devices[i].info->fabric_attr->prov_name,
             devices[i].speed_mbps, devices[i].pci_path ? ", PCI " : "",
             devices[i].pci_path ? devices[i].pci_path : "");
  }
  return ncclSuccess;
}

ncclResult_t fab_init(ncclDebugLogger_t logger) {
  fab_set_logger(logger);
  pthread_mutex_lock(&table_lock);
  ncclResult_t rc = ncclSuccess;
  if (!discovered) {
    rc = discover();
    discovered = rc == ncclSuccess;
  }
  pthread_mutex_unlock(&table_lock);
  return rc;
}

ncclResult_t fab_devices(int* ndev) {
  if (ndev == NULL) return ncclInvalidArgument;
  pthread_mutex_lock(&table_lock);
  int known = discovered;
  *ndev = ndevices;
  pthread_mutex_unlock(&table_lock);
  if (!known) {
    FAB_WARN("devices called before a successful init");
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

struct fab_device* fab_device_get(int dev) {
  pthread_mutex_lock(&table_lock);
  struct fab_device* d = discovered && dev >= 0 && dev < ndevices ? &devices[dev] : NULL;
  int count = ndevices;
  pthread_mutex_unlock(&table_lock);
  if (d == NULL) FAB_WARN("no device %d (%d known)", dev, count);
  return d;
}

ncclResult_t fab_properties(int dev, struct fab_props* props) {
  struct fab_device* d = fab_device_get(dev);
  if (d == NULL || props == NULL) return ncclInvalidArgument;
  props->name = d->name;
  props->pci_path = d->pci_path;
  /* The interface index tells NICs apart; each is its own physical port here. */
  props->guid = if_nametoindex(d->name);
  props->speed_mbps = d->speed_mbps;
  props->latency_us = 0.0f;
  props->max_comms = MAX_COMMS;
  /* Each irecv takes one buffer: grouped receives are not implemented. */
  props->max_recvs = 1;
  props->max_p2p_bytes = FAB_MAX_TRANSFER_BYTES;
  return ncclSuccess;
}

struct fi_info* fab_device_info(struct fab_device* d) { return d->info; }

const char* fab_device_name(struct fab_device* d) { return d->name; }

int fab_device_needs_mr(struct fab_device* d) { return (d->info->domain_attr->mr_mode & FI_MR_LOCAL) != 0; }

struct fid_domain* fab_device_domain(struct fab_device* d) {
  pthread_mutex_lock(&d->lock);
  if (d->domain == NULL) {
    int rc = fi_fabric(d->info->fabric_attr, &d->fabric, NULL);
    if (rc != 0) {
      FAB_WARN("%s: fi_fabric failed: %s", d->name, fi_strerror(-rc));
    } else {
      rc = fi_domain(d->fabric, d->info, &d->domain, NULL);
      if (rc != 0) {
        FAB_WARN("%s: fi_domain failed: %s", d->name, fi_strerror(-rc));
        fi_close(&d->fabric->fid);
        d->fabric = NULL;
        d->domain = NULL;
      }
    }
  }
  struct fid_domain* domain = d->domain;
  pthread_mutex_unlock(&d->lock);
  return domain;
}
