/* placeholder: the route tables (owner: routes.pxi author) */
#ifndef RMQ_ROUTETABLE_H
#define RMQ_ROUTETABLE_H
#endif
