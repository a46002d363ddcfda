// optim may not include storage (its peer).
#include "optim/optimizer.h"
#include "storage/store/checksum.h"
