/* placeholder */
#ifndef RMQ_SCAN_H
#define RMQ_SCAN_H
#endif
