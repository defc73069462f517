/* Safe sandbox ids: the form a sandbox id takes in URLs and route names. */
#ifndef AK_SAFEID_H
#define AK_SAFEID_H

/* The longest safe id, in bytes. */
#define SAFEID_MAX 200

char *safeid_make(const char *);

#endif
