
#ifdef __cplusplus
}
#endif
